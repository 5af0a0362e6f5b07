"""Reading and editing a store's raw rows/documents behind its back (encryption tests): what an
attacker with database access sees, and moving a stored value to another row."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID


def dump(store: Any) -> str:
    """Every row of every table (SQL) or document of every collection (Mongo) as text; for
    SQLite also the database file's bytes (and its WAL), decoded leniently."""
    parts: list[str] = []
    if hasattr(store, "engine"):
        import sqlalchemy as sa

        engine = store.engine
        metadata = sa.MetaData()
        metadata.reflect(engine)
        with engine.connect() as conn:
            for table in metadata.sorted_tables:
                for row in conn.execute(sa.select(table)):
                    parts.append(repr(tuple(row)))
        database = engine.url.database
        if engine.url.get_backend_name() == "sqlite" and database:
            for suffix in ("", "-wal"):
                path = Path(database + suffix)
                if path.exists():
                    parts.append(path.read_bytes().decode("latin-1"))
    else:
        db = store._db
        for name in db.list_collection_names():
            parts.extend(repr(doc) for doc in db[name].find({}))
    return "\n".join(parts)


def read_column(store: Any, job_id: UUID, column: str) -> Any:
    if hasattr(store, "engine"):
        import sqlalchemy as sa

        from ratchet_store_sql.schema import jobs

        with store.engine.connect() as conn:
            return conn.execute(sa.select(jobs.c[column]).where(jobs.c.id == job_id)).scalar_one()
    doc = store._jobs.find_one({"_id": job_id})
    return doc[column]


def write_column(store: Any, job_id: UUID, column: str, value: Any) -> None:
    if hasattr(store, "engine"):
        import sqlalchemy as sa

        from ratchet_store_sql.schema import jobs

        with store.engine.begin() as conn:
            conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values({column: value}))
        return
    store._jobs.update_one({"_id": job_id}, {"$set": {column: value}})
