"""Ratchet's MongoDB store (pymongo). Imports neither the engine nor SQLAlchemy."""

from ratchet_store_mongo.schema import COLLECTIONS, HEAD, MongoSchema
from ratchet_store_mongo.store import CODEC_OPTIONS, DEFAULT_DATABASE, MongoJobStore

__all__ = [
    "CODEC_OPTIONS",
    "COLLECTIONS",
    "DEFAULT_DATABASE",
    "HEAD",
    "MongoJobStore",
    "MongoSchema",
]
