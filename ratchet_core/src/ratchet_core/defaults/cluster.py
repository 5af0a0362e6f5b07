"""Cluster defaults: node identity, node tag affinity and the no-op coordinator."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable

from ratchet_api.model import JobWakeupHint, NodeIdentity, NodeTagFilter
from ratchet_api.spi import RatchetConfig, RatchetConfigKey
from ratchet_core.runtime.config import parse_optional_str, parse_str_list, register_key

NODE_ID: RatchetConfigKey[str | None] = register_key(
    RatchetConfigKey(
        "node.id",
        parse_optional_str,
        None,
        "This node's id; default <host>-<pid>-<6 random hex>. Must be unique among live nodes.",
    )
)
NODE_TAGS: RatchetConfigKey[tuple[str, ...]] = register_key(
    RatchetConfigKey(
        "node.tags",
        parse_str_list,
        (),
        "Comma separated tags describing this node (shown with the node; informational).",
    )
)
NODE_TAGS_REQUIRED: RatchetConfigKey[tuple[str, ...]] = register_key(
    RatchetConfigKey(
        "node.tags.required",
        parse_str_list,
        (),
        "This node only claims jobs carrying every one of these tags.",
    )
)
NODE_TAGS_EXCLUDED: RatchetConfigKey[tuple[str, ...]] = register_key(
    RatchetConfigKey(
        "node.tags.excluded",
        parse_str_list,
        (),
        "This node never claims jobs carrying any of these tags.",
    )
)


class DefaultNodeIdentityProvider:
    """``node.id`` when configured, else ``<host>-<pid>-<random>``; fixed at construction."""

    def __init__(self, settings: RatchetConfig) -> None:
        host = socket.gethostname() or "localhost"
        pid = os.getpid()
        tags: tuple[str, ...] = settings.get(NODE_TAGS)
        node_id = settings.get(NODE_ID) or f"{host}-{pid}-{secrets.token_hex(3)}"
        self._identity = NodeIdentity(node_id=node_id, host=host, pid=pid, tags=frozenset(tags))

    def get_node_id(self) -> str:
        return self._identity.node_id

    def identity(self) -> NodeIdentity:
        return self._identity


class DefaultNodeTagAffinityProvider:
    """The filter from ``node.tags.required`` and ``node.tags.excluded`` (empty: claim all).
    A tag both required and excluded is a configuration error."""

    def __init__(self, settings: RatchetConfig) -> None:
        required_tags: tuple[str, ...] = settings.get(NODE_TAGS_REQUIRED)
        excluded_tags: tuple[str, ...] = settings.get(NODE_TAGS_EXCLUDED)
        required = frozenset(required_tags)
        excluded = frozenset(excluded_tags)
        both = required & excluded
        if both:
            from ratchet_api.errors import ConfigurationError

            raise ConfigurationError(
                "node.tags.required",
                f"tags {sorted(both)} are also in node.tags.excluded; a node could never "
                "claim such jobs",
            )
        self._filter = NodeTagFilter(required=required, excluded=excluded)

    def tag_filter(self) -> NodeTagFilter:
        return self._filter


class NoOpClusterCoordinator:
    """No cross-node wake-ups: other nodes find new work by polling."""

    def notify_new_work(
        self, priority: int, source: NodeIdentity, execution_target: str | None
    ) -> None:
        pass

    def register_wakeup_listener(self, listener: Callable[[JobWakeupHint], None]) -> None:
        pass

    def close(self) -> None:
        pass


__all__ = [
    "NODE_ID",
    "NODE_TAGS",
    "NODE_TAGS_EXCLUDED",
    "NODE_TAGS_REQUIRED",
    "DefaultNodeIdentityProvider",
    "DefaultNodeTagAffinityProvider",
    "NoOpClusterCoordinator",
]
