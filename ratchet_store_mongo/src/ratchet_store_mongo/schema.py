"""The collection layout of the Mongo store, declared once, and its schema manager.

Every collection and index the store uses is listed in ``COLLECTIONS``; ``MongoSchema.upgrade``
creates them idempotently (``ratchet db upgrade``) and records the revision in the
``<prefix>schema`` collection. Nothing is created lazily on the hot path.

Jobs are one document each: tags, write-once properties (``props``: ``[{k, v}]``) and versioned
state (``state``: ``[{ns, json, v}]``) are embedded, so every job mutation and every fenced
property/state write is a single-document atomic update. Only moves across collections (archive,
delete with logs and executions, bulk insert) use multi-document transactions.
"""

from __future__ import annotations

from typing import Any

import attrs
from pymongo import ASCENDING, DESCENDING, IndexModel
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import CollectionInvalid, OperationFailure

from ratchet_api.errors import StoreError

HEAD = "0002"
REVISIONS: tuple[str, ...] = ("0001", "0002")
"""Known revisions, oldest first. ``0001``: the initial layout. ``0002``: integer priorities
(the stored levels 0/5/10/15 become -50/0/50/100, named points of -100..100)."""

_PRIORITY_COLLECTIONS = ("jobs", "archive", "recurring")
_PRIORITY_UP = ((0, -50), (5, 0), (10, 50), (15, 100))
_MIGRATING = "_ratchet_0002"
"""Marks a document whose priority 0002 already moved (so a rerun after a crash skips it)."""

SCHEMA_DOC_ID = "ratchet"


@attrs.frozen
class CollectionSpec:
    """One collection: its name without the prefix and its indexes."""

    name: str
    indexes: tuple[IndexModel, ...] = ()


def _ix(name: str, *keys: tuple[str, int], **options: Any) -> IndexModel:
    return IndexModel(list(keys), name=name, **options)


COLLECTIONS: tuple[CollectionSpec, ...] = (
    CollectionSpec(
        "jobs",
        (
            # the claim: equality on status, sort priority desc / due / id
            _ix(
                "claim",
                ("status", ASCENDING),
                ("priority", DESCENDING),
                ("scheduled_at", ASCENDING),
                ("_id", ASCENDING),
            ),
            # the fair claim (FairClaimStore): keys of PENDING jobs, each key's head in claim
            # order, RUNNING jobs per key; keyed jobs only, so an unkeyed enqueue writes none
            _ix(
                "fairness",
                ("status", ASCENDING),
                ("fairness_key", ASCENDING),
                ("priority", DESCENDING),
                ("scheduled_at", ASCENDING),
                ("_id", ASCENDING),
                partialFilterExpression={"fairness_key": {"$type": "string"}},
            ),
            _ix(
                "idempotency_key",
                ("idempotency_key", ASCENDING),
                unique=True,
                partialFilterExpression={"idempotency_key": {"$type": "string"}},
            ),
            _ix("owner", ("owner", ASCENDING), ("status", ASCENDING)),
            _ix("heartbeat", ("status", ASCENDING), ("heartbeat_at", ASCENDING)),
            _ix("finished", ("status", ASCENDING), ("finished_at", ASCENDING)),
            _ix("signal_deadline", ("status", ASCENDING), ("signal_deadline", ASCENDING)),
            _ix("signal_key", ("signal_key", ASCENDING), ("status", ASCENDING)),
            _ix("parent", ("parent_id", ASCENDING), ("created_at", ASCENDING)),
            _ix("batch", ("batch_id", ASCENDING)),
            _ix("created", ("created_at", ASCENDING), ("_id", ASCENDING)),
            _ix("tags", ("tags", ASCENDING)),
            _ix("props", ("props.k", ASCENDING), ("props.v", ASCENDING)),
        ),
    ),
    CollectionSpec(
        "archive",
        (
            _ix("finished", ("finished_at", DESCENDING), ("_id", DESCENDING)),
            _ix("tags", ("tags", ASCENDING)),
        ),
    ),
    CollectionSpec("nodes", (_ix("heartbeat", ("last_heartbeat", ASCENDING)),)),
    CollectionSpec("recurring", (_ix("due", ("enabled", ASCENDING), ("next_fire_at", ASCENDING)),)),
    CollectionSpec("batches"),
    CollectionSpec(
        "conditions", (_ix("parent", ("parent_job_id", ASCENDING), ("position", ASCENDING)),)
    ),
    CollectionSpec("permits"),
    CollectionSpec("rate_limits"),
    CollectionSpec("locks"),
    CollectionSpec("executions", (_ix("job", ("job_id", ASCENDING), ("attempt", ASCENDING)),)),
    CollectionSpec("logs", (_ix("job", ("job_id", ASCENDING), ("_id", ASCENDING)),)),
    CollectionSpec("schema"),
)

NAMESPACE_EXISTS = 48


class MongoSchema:
    """``SchemaManager`` of the Mongo store: collections and indexes, versioned by one document."""

    def __init__(self, database: Database[dict[str, Any]], prefix: str) -> None:
        self._db = database
        self._prefix = prefix

    def collection_name(self, name: str) -> str:
        return self._prefix + name

    def _schema(self) -> Collection[dict[str, Any]]:
        return self._db[self.collection_name("schema")]

    def _resolve(self, revision: str) -> str:
        if revision == "head":
            return HEAD
        if revision not in REVISIONS:
            raise StoreError(
                f"unknown Mongo schema revision {revision!r}; known: head, {', '.join(REVISIONS)}"
            )
        return revision

    def upgrade(self, revision: str = "head") -> None:
        """Create every collection and index of ``revision`` (idempotent, safe to run from
        several processes at once) and record the revision."""
        target = self._resolve(revision)
        current = self.current_revision()
        if current is not None and current not in REVISIONS:
            raise StoreError(
                f"the database holds Mongo schema revision {current!r}, newer than this "
                f"ratchet-store-mongo knows ({HEAD}); upgrade ratchet-store-mongo"
            )
        existing = set(self._db.list_collection_names())
        for spec in COLLECTIONS:
            name = self.collection_name(spec.name)
            if name not in existing:
                try:
                    self._db.create_collection(name)
                except CollectionInvalid:
                    pass  # created concurrently by another upgrade
                except OperationFailure as exc:
                    if exc.code != NAMESPACE_EXISTS:
                        raise
            if spec.indexes:
                self._db[name].create_indexes(list(spec.indexes))
        if current == "0001" and REVISIONS.index(target) >= 1:
            self._move_priorities(_PRIORITY_UP)  # a new database has no old priorities
        self._schema().update_one(
            {"_id": SCHEMA_DOC_ID},
            {"$set": {"revision": target}, "$currentDate": {"upgraded_at": True}},
            upsert=True,
        )

    def _move_priorities(self, mapping: tuple[tuple[int, int], ...]) -> None:
        """Move stored priorities ``old -> new`` in every collection that keeps one. Each
        moved document is marked until the end, so a rerun after a crash moves none twice."""
        for spec_name in _PRIORITY_COLLECTIONS:
            collection = self._db[self.collection_name(spec_name)]
            for old, new in mapping:
                collection.update_many(
                    {"priority": old, _MIGRATING: {"$exists": False}},
                    {"$set": {"priority": new, _MIGRATING: True}},
                )
            collection.update_many({_MIGRATING: {"$exists": True}}, {"$unset": {_MIGRATING: ""}})

    def downgrade(self, revision: str) -> None:
        """``"base"`` drops every Ratchet collection (and its data); ``0001`` moves integer
        priorities back to the nearest of the old levels; a revision at or above the current
        one is a no-op."""
        if revision != "base":
            target = self._resolve(revision)
            current = self.current_revision()
            if current == "0002" and target == "0001":
                for spec_name in _PRIORITY_COLLECTIONS:
                    collection = self._db[self.collection_name(spec_name)]
                    for low, high, old in (
                        (-100, -26, 0),
                        (-25, 24, 5),
                        (25, 74, 10),
                        (75, 100, 15),
                    ):
                        collection.update_many(
                            {
                                "priority": {"$gte": low, "$lte": high},
                                _MIGRATING: {"$exists": False},
                            },
                            {"$set": {"priority": old, _MIGRATING: True}},
                        )
                    collection.update_many(
                        {_MIGRATING: {"$exists": True}}, {"$unset": {_MIGRATING: ""}}
                    )
                self._schema().update_one({"_id": SCHEMA_DOC_ID}, {"$set": {"revision": target}})
            return
        for spec in COLLECTIONS:
            self._db.drop_collection(self.collection_name(spec.name))

    def current_revision(self) -> str | None:
        doc = self._schema().find_one({"_id": SCHEMA_DOC_ID})
        if doc is None:
            return None
        revision = doc.get("revision")
        return revision if isinstance(revision, str) else None


__all__ = ["COLLECTIONS", "HEAD", "REVISIONS", "CollectionSpec", "MongoSchema"]
