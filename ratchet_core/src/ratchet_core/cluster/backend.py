"""``create_cluster_coordinator``: the ``ClusterCoordinator`` that ``cluster.backend`` selects
(the container's ``cluster_coordinator``).

A module of its own because it knows every transport, the SQLite file watch
(:mod:`ratchet_core.cluster.sqlite`) included, which builds on :mod:`ratchet_core.cluster.coordination`'s
listener thread; kept in ``cluster`` it closed an import circle with ``cluster_sqlite``
(tests/core/test_import_cycles.py).
"""

from __future__ import annotations

from ratchet_api.spi.runtime import ClusterCoordinator, NodeIdentityProvider, RatchetConfig
from ratchet_api.store.protocols import JobStore
from ratchet_core.cluster.coordination import (  # the URL helpers are the cluster module's own
    CLUSTER_BACKEND,
    CLUSTER_CHANNEL,
    CLUSTER_SQLITE_CHECK_INTERVAL,
    CLUSTER_URL,
    POOLER_OPTION,
    PostgresNotifyClusterCoordinator,
    RedisClusterCoordinator,
    _database_name,
    _log,
    _native_postgres,
    _watched_file,
    behind_transaction_pooler,
    libpq_url,
    sqlite_database,
)
from ratchet_core.runtime.config import STORE_URL


def create_cluster_coordinator(
    settings: RatchetConfig, node_identity: NodeIdentityProvider, store: JobStore | None = None
) -> ClusterCoordinator:
    """The coordinator selected by ``cluster.backend`` (the container's ``cluster_coordinator``).
    Drivers are imported only for the chosen backend. ``store`` (the container's job store)
    tells which SQLite file to watch; without it ``store.url`` does."""
    from ratchet_api.errors import ConfigurationError

    backend = settings.get(CLUSTER_BACKEND)
    channel = settings.get(CLUSTER_CHANNEL)
    url = settings.get(CLUSTER_URL)
    store_url = settings.get(STORE_URL)
    node_id = node_identity.get_node_id()
    if backend in ("auto", "postgres") and behind_transaction_pooler(url or store_url):
        # PgBouncer in transaction mode gives each transaction any server connection: a LISTEN
        # is forgotten as soon as its statement ends, so notifications would never arrive
        _log.warning(
            "cluster wake-ups: %s goes through a transaction-pooling PgBouncer "
            "(%s=transaction), where a LISTEN cannot keep its session: this worker finds new "
            "jobs by polling only (worker.poll_interval). Set cluster.url to a direct "
            "PostgreSQL URL (not through the pooler) for LISTEN/NOTIFY wake-ups.",
            "cluster.url" if url else "store.url",
            POOLER_OPTION,
        )
        backend = "none"
    if backend == "auto":
        if _native_postgres(url or store_url):
            backend = "postgres"
        elif url is None and _watched_file(store, store_url) is not None:
            backend = "sqlite"
        else:
            backend = "none"
    if backend == "sqlite":
        database = sqlite_database(url) if url else _watched_file(store, store_url)
        if database is None:
            raise ConfigurationError(
                "cluster.url",
                f"cluster.backend=sqlite needs a SQLite file (cluster.url, or a SQL store on one), "
                f"got {url or store_url!r}",
            )
        interval = settings.get(CLUSTER_SQLITE_CHECK_INTERVAL).total_seconds()
        from ratchet_core.cluster.sqlite import SqliteFileClusterCoordinator

        return SqliteFileClusterCoordinator(database, node_id, interval=interval)
    if backend == "postgres":
        target = url or store_url
        try:
            libpq_url(target)
        except ValueError:
            raise ConfigurationError(
                "cluster.url",
                f"cluster.backend=postgres needs a PostgreSQL URL (cluster.url or store.url), "
                f"got {target!r}",
            ) from None
        return PostgresNotifyClusterCoordinator(
            target,
            node_id,
            channel,
            database_notifies_inserts=url is None
            or url == store_url
            # a direct URL next to the pooled store URL: the same database's trigger notifies
            or (
                behind_transaction_pooler(store_url)
                and _database_name(url) == _database_name(store_url or "")
            ),
        )
    if backend == "redis":
        if not url:
            raise ConfigurationError(
                "cluster.url", "cluster.backend=redis needs cluster.url (redis://host:6379/0)"
            )
        return RedisClusterCoordinator(url, node_id, channel)
    from ratchet_core.defaults.cluster import NoOpClusterCoordinator

    coordinator: ClusterCoordinator = NoOpClusterCoordinator()
    return coordinator


__all__ = ["create_cluster_coordinator"]
