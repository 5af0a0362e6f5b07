"""No Django models: Ratchet's tables are managed by its own migrations (see migrate.py); this
module exists so that Django sends ``post_migrate`` to the app."""
