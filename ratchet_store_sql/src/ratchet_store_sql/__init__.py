"""Ratchet's SQL store: SQLAlchemy Core on SQLite, PostgreSQL and MySQL/MariaDB."""
