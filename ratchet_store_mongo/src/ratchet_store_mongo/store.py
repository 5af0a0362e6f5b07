"""``MongoJobStore``: the Ratchet store on MongoDB (pymongo)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC
from typing import Any, TypeVar, cast

from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions
from pymongo import MongoClient
from pymongo.client_session import ClientSession
from pymongo.errors import ConfigurationError as MongoConfigurationError
from pymongo.errors import InvalidURI, PyMongoError

from ratchet_api.errors import ConfigurationError, StoreError
from ratchet_api.store.protocols import JobStore
from ratchet_api.store.versions import STORE_SPI
from ratchet_store_mongo._admin import AdminMixin
from ratchet_store_mongo._base import Doc
from ratchet_store_mongo._cluster import ClusterMixin
from ratchet_store_mongo._features import FeaturesMixin
from ratchet_store_mongo._flow import MongoFlowControlMixin
from ratchet_store_mongo._maintenance import JobMaintenanceMixin
from ratchet_store_mongo._queues import MongoQueueStatsMixin
from ratchet_store_mongo._sealed import MongoSealedValueMixin
from ratchet_store_mongo._worker_batch import MongoWorkerBatchMixin
from ratchet_store_mongo.errors import is_transient, translate, translated
from ratchet_store_mongo.schema import MongoSchema

C = TypeVar("C")

DEFAULT_DATABASE = "ratchet"
DEFAULT_PREFIX = "ratchet_"

CODEC_OPTIONS: CodecOptions[Doc] = CodecOptions(
    document_class=dict,
    tz_aware=True,
    tzinfo=UTC,
    uuid_representation=UuidRepresentation.STANDARD,
)
"""How the store reads and writes BSON, whatever the options of an application's client."""


class MongoJobStore(
    JobMaintenanceMixin,
    ClusterMixin,
    FeaturesMixin,
    MongoFlowControlMixin,
    AdminMixin,
    MongoQueueStatsMixin,
    MongoWorkerBatchMixin,
    MongoSealedValueMixin,
):
    """The Ratchet store on MongoDB 6+ (a replica set: transactions are used for the few
    operations that span collections).

    ``MongoJobStore("mongodb://host/ratchet?replicaSet=rs0")`` opens (and on ``close``
    releases) its own client; the database is the URL's path (default ``ratchet``) unless
    ``database`` names another. ``MongoJobStore(client, database="app")`` uses an application's
    existing ``MongoClient`` (left open by ``close``). Collections are named ``<prefix>jobs``,
    ``<prefix>nodes``...; create them with ``SchemaManager.upgrade()`` (``ratchet db upgrade``).

    Every method is thread safe (pymongo clients are). Datetimes are stored with millisecond
    precision: values are truncated to the millisecond when written.
    """

    ratchet_store_spi = STORE_SPI
    """The store SPI version this store implements (``ratchet_api.store.versions``)."""

    def __init__(
        self,
        url_or_client: str | MongoClient[Any],
        *,
        database: str | None = None,
        collection_prefix: str = DEFAULT_PREFIX,
        **client_options: Any,
    ) -> None:
        if isinstance(url_or_client, MongoClient):
            if client_options:
                raise ConfigurationError(
                    "client_options", "options apply only when the store opens its own client"
                )
            self._client = url_or_client
            self._owns_client = False
            name = database
            if name is None:
                try:
                    name = url_or_client.get_default_database().name
                except MongoConfigurationError:
                    name = DEFAULT_DATABASE
        elif isinstance(url_or_client, str):
            if not url_or_client.startswith(("mongodb://", "mongodb+srv://")):
                raise ConfigurationError(
                    "url", f"expected a mongodb:// or mongodb+srv:// URL, got {url_or_client!r}"
                )
            options: dict[str, Any] = {
                "tz_aware": True,
                "tzinfo": UTC,
                "uuidRepresentation": "standard",
                "appname": "ratchet",
                **client_options,
            }
            try:
                self._client = MongoClient(url_or_client, **options)
            except (InvalidURI, MongoConfigurationError) as exc:
                raise ConfigurationError("url", f"invalid MongoDB URL: {exc}") from exc
            except PyMongoError as exc:
                raise translate(exc, "connect") from exc
            self._owns_client = True
            name = database or self._client.get_default_database(DEFAULT_DATABASE).name
        else:
            raise ConfigurationError(
                "url_or_client",
                f"expected a mongodb:// URL or a pymongo MongoClient, got "
                f"{type(url_or_client).__name__}",
            )
        if not isinstance(collection_prefix, str):
            raise ConfigurationError("collection_prefix", "must be a string")
        self._codec = CODEC_OPTIONS
        self._db = self._client.get_database(name, codec_options=CODEC_OPTIONS)
        self._prefix = collection_prefix
        self._session: ClientSession | None = None
        self._schema = MongoSchema(self._db, collection_prefix)
        self._closed = False

    @property
    def database_name(self) -> str:
        return self._db.name

    @property
    def client(self) -> MongoClient[Any]:
        """The pymongo client (start a session on it to use ``joined``)."""
        return self._client

    def is_transient(self, exc: BaseException) -> bool:
        """Whether a retry of the call that raised ``exc`` may succeed: this store's
        declaration of its transient errors, read by the engine's one retry helper
        (``ratchet_core.worker.store_retry.transient_predicate``). True for a ``StoreError``
        whose ``retryable`` is set and for the pymongo errors it is made from (network errors,
        server selection timeouts, primary step-downs, write conflicts, errors labelled
        ``TransientTransactionError``/``RetryableWriteError``); False for everything else."""
        if isinstance(exc, StoreError):
            return exc.retryable
        return isinstance(exc, PyMongoError) and is_transient(exc)

    def capability(self, kind: Callable[..., C]) -> C | None:
        return cast(C, self) if isinstance(self, cast(type, kind)) else None

    def joined(self, transaction: object) -> JobStore:
        """A view of this store whose REQUIRED mutations use ``transaction`` (a pymongo
        ``ClientSession`` of this store's client, usually inside ``start_transaction`` or
        ``with_transaction``): they commit or abort with it. Lock, heartbeat and node deletion
        still commit on their own."""
        if not isinstance(transaction, ClientSession):
            raise StoreError(
                f"MongoJobStore can join a pymongo ClientSession, not a "
                f"{type(transaction).__name__}"
            )
        if transaction.client is not self._client:
            raise StoreError("the session belongs to another MongoClient than this store's")
        view = copy.copy(self)
        view._session = transaction
        view._owns_client = False
        return view

    def close(self) -> None:
        if self._owns_client and not self._closed:
            self._closed = True
            self._client.close()

    # ------------------------------------------------------------------ SchemaManager

    @translated("schema upgrade")
    def upgrade(self, revision: str = "head") -> None:
        """Create the collections and indexes (idempotent); see ``docs/stores/mongodb.md``."""
        self._schema.upgrade(revision)

    @translated("schema downgrade")
    def downgrade(self, revision: str) -> None:
        """``"base"`` drops every Ratchet collection with its data."""
        self._schema.downgrade(revision)

    @translated("current_revision")
    def current_revision(self) -> str | None:
        return self._schema.current_revision()

    def __repr__(self) -> str:
        return f"MongoJobStore(database={self._db.name!r}, prefix={self._prefix!r})"


__all__ = ["CODEC_OPTIONS", "DEFAULT_DATABASE", "MongoJobStore"]
