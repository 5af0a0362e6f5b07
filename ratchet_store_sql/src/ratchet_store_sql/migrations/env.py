"""Alembic environment of the Ratchet SQL store.

Run programmatically by ``ratchet_store_sql.SqlSchemaManager``: the connection comes in
``config.attributes["connection"]``; the version table is ``ratchet_alembic_version`` so the
store never collides with an application's own Alembic history.
"""

from __future__ import annotations

from alembic import context

from ratchet_store_sql.schema import VERSION_TABLE, declared_on, described_by_metadata, metadata


def _include_name(name: str | None, type_: str, parent_names: object) -> bool:
    return name != VERSION_TABLE and described_by_metadata(name, type_)


def _include_object(
    obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    # an index of other dialects only (schema.only_on) is not missing here
    return reflected or declared_on(name, type_, context.get_bind().dialect.name)


def run_migrations() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError(
            "the Ratchet migrations run through ratchet_store_sql.migrate() or `ratchet db upgrade`"
        )
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        include_name=_include_name,
        include_object=_include_object,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
