"""Cluster liveness: nodes, lock leases and resource permits.

These writes never join a caller's session (REQUIRES_NEW): each is one single-document atomic
operation (or one ``update_many``/``delete_many``) that commits on its own, so other nodes see
it as soon as the call returns and no outer rollback can undo it. Every expiry is computed by the
server from ``$$NOW``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import datetime, timedelta

from pymongo import ASCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError

from ratchet_api.errors import StoreDataError
from ratchet_api.store.entities import LockEntity, NodeEntity
from ratchet_store_mongo._base import NOW, Doc, MongoBase, lit, now_plus, require_key
from ratchet_store_mongo.documents import from_document, to_bson_datetime, to_document
from ratchet_store_mongo.errors import translated


def _check_ttl(ttl: timedelta, field: str = "ttl") -> timedelta:
    if not isinstance(ttl, timedelta) or ttl <= timedelta(0):
        raise StoreDataError(field, f"must be a positive timedelta, got {ttl!r}")
    return ttl


def _check_name(value: str, field: str) -> str:
    return require_key(value, field)


class ClusterMixin(MongoBase):
    # ------------------------------------------------------------------ nodes

    @translated("server_now")
    def server_now(self) -> datetime:
        return self._now()

    @translated("upsert_heartbeat")
    def upsert_heartbeat(self, node: NodeEntity) -> None:
        doc = to_document(node)
        node_id = doc.pop("_id")
        started_at = doc.pop("started_at")
        doc.pop("last_heartbeat")
        self._col("nodes").update_one(
            {"_id": node_id},
            [
                {
                    "$set": {
                        **{key: lit(value) for key, value in doc.items()},
                        "started_at": {"$ifNull": ["$started_at", lit(started_at)]},
                        "last_heartbeat": NOW,
                    }
                }
            ],
            upsert=True,
        )

    def _inactive(self, timeout: timedelta) -> Doc:
        if not isinstance(timeout, timedelta) or timeout < timedelta(0):
            raise StoreDataError("timeout", f"must be a non-negative timedelta, got {timeout!r}")
        return {"last_heartbeat": {"$lt": self._now() - timeout}}

    @translated("find_inactive_nodes")
    def find_inactive_nodes(self, timeout: timedelta) -> list[NodeEntity]:
        cursor = self._col("nodes").find(self._inactive(timeout), session=self._session)
        return [from_document(NodeEntity, d) for d in cursor.sort("_id", ASCENDING)]

    @translated("find_all_nodes")
    def find_all_nodes(self) -> list[NodeEntity]:
        cursor = self._col("nodes").find({}, session=self._session).sort("_id", ASCENDING)
        return [from_document(NodeEntity, d) for d in cursor]

    @translated("delete_inactive_nodes")
    def delete_inactive_nodes(self, timeout: timedelta) -> int:
        return self._col("nodes").delete_many(self._inactive(timeout)).deleted_count

    @translated("delete_nodes_by_ids")
    def delete_nodes_by_ids(self, node_ids: Sequence[str]) -> int:
        if not node_ids:
            return 0
        return self._col("nodes").delete_many({"_id": {"$in": list(node_ids)}}).deleted_count

    # ------------------------------------------------------------------ locks

    @translated("try_lock")
    def try_lock(self, name: str, owner: str, ttl: timedelta) -> bool:
        _check_name(name, "name")
        _check_name(owner, "owner")
        _check_ttl(ttl)
        # One conditional pipeline update decides the winner atomically: the lease changes
        # hands only if it is free, expired, or already ours; the returned document says who
        # holds it now.
        now = to_bson_datetime(self._now())
        wins = {
            "$or": [
                {"$eq": ["$owner", lit(owner)]},
                {"$lte": [{"$ifNull": ["$expires_at", None]}, lit(now)]},
            ]
        }
        update = [
            {
                "$set": {
                    "acquired_at": {"$cond": [wins, NOW, "$acquired_at"]},
                    "expires_at": {"$cond": [wins, now_plus(ttl), "$expires_at"]},
                    "owner": {"$cond": [wins, lit(owner), "$owner"]},
                }
            }
        ]
        locks = self._col("locks")
        # Never an upsert: the update only touches an existing lease, and a missing lease is
        # created by an insert that exactly one racer wins (the others retry the update).
        for _ in range(3):
            doc = locks.find_one_and_update(
                {"_id": name}, update, return_document=ReturnDocument.AFTER
            )
            if doc is not None:
                return bool(doc.get("owner") == owner)
            try:
                locks.insert_one(
                    {"_id": name, "owner": owner, "acquired_at": now, "expires_at": now + ttl}
                )
                return True
            except DuplicateKeyError:
                continue
        return False

    @translated("unlock")
    def unlock(self, name: str, owner: str) -> bool:
        return self._col("locks").delete_one({"_id": name, "owner": owner}).deleted_count == 1

    @translated("renew_lock")
    def renew_lock(self, name: str, owner: str, ttl: timedelta) -> bool:
        _check_ttl(ttl)
        result = self._col("locks").update_one(
            {"_id": name, "owner": owner, "expires_at": {"$gt": self._now()}},
            [{"$set": {"expires_at": now_plus(ttl)}}],
        )
        return result.modified_count == 1

    @translated("find_lock")
    def find_lock(self, name: str) -> LockEntity | None:
        doc = self._col("locks").find_one({"_id": name}, session=self._session)
        return None if doc is None else from_document(LockEntity, doc)

    # ------------------------------------------------------------------ resource permits

    @translated("try_acquire_permit")
    def try_acquire_permit(
        self, resource_key: str, holder: str, limit: int, ttl: timedelta
    ) -> bool:
        _check_name(resource_key, "resource_key")
        _check_name(holder, "holder")
        _check_ttl(ttl)
        if not isinstance(limit, int) or limit < 1:
            raise StoreDataError("limit", f"must be a positive integer, got {limit!r}")
        # All permits of a key live in one document, so counting and taking is one atomic
        # update: drop expired permits and the holder's own, then add the holder's if the rest
        # leave room.
        now = lit(self._now())
        others = {
            "$filter": {
                "input": {"$ifNull": ["$holders", []]},
                "as": "p",
                "cond": {
                    "$and": [{"$gt": ["$$p.expires_at", now]}, {"$ne": ["$$p.holder", lit(holder)]}]
                },
            }
        }
        mine = [{"holder": lit(holder), "expires_at": now_plus(ttl)}]
        update = [
            {
                "$set": {
                    "holders": {
                        "$let": {
                            "vars": {"others": others},
                            "in": {
                                "$cond": [
                                    {"$lt": [{"$size": "$$others"}, limit]},
                                    {"$concatArrays": ["$$others", mine]},
                                    "$$others",
                                ]
                            },
                        }
                    }
                }
            }
        ]
        permits = self._col("permits")
        for _ in range(3):
            doc = permits.find_one_and_update(
                {"_id": resource_key},
                update,
                return_document=ReturnDocument.AFTER,
                session=self._session,
            )
            if doc is not None:
                return any(p.get("holder") == holder for p in doc.get("holders") or [])
            # first use of the key: create its empty permit document (outside any caller
            # transaction, which a duplicate key would abort), then take a permit
            with contextlib.suppress(DuplicateKeyError):
                permits.insert_one({"_id": resource_key, "holders": []})
        return False

    @translated("release_permit")
    def release_permit(self, resource_key: str, holder: str) -> bool:
        result = self._col("permits").update_one(
            {"_id": resource_key, "holders.holder": holder},
            {"$pull": {"holders": {"holder": holder}}},
            session=self._session,
        )
        return result.modified_count == 1

    @translated("count_permits")
    def count_permits(self, resource_key: str) -> int:
        rows = list(
            self._col("permits").aggregate(
                [
                    {"$match": {"_id": resource_key}},
                    {
                        "$project": {
                            "n": {
                                "$size": {
                                    "$filter": {
                                        "input": {"$ifNull": ["$holders", []]},
                                        "as": "p",
                                        "cond": {"$gt": ["$$p.expires_at", lit(self._now())]},
                                    }
                                }
                            }
                        }
                    },
                ],
                session=self._session,
            )
        )
        return int(rows[0]["n"]) if rows else 0


__all__ = ["ClusterMixin"]
