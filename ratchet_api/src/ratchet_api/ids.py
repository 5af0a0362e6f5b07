"""Job ids: UUID version 7 (time ordered, so ids sort by creation time)."""

from __future__ import annotations

import os
import threading
import time
from uuid import UUID

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def uuid7() -> UUID:
    """Return a new UUIDv7 (RFC 9562), monotonic within this process.

    Thread safe. Within one millisecond a 12-bit counter keeps ids increasing; when it overflows
    the timestamp is advanced by one millisecond.
    """
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms > _last_ms:
            _last_ms = ms
            _counter = int.from_bytes(os.urandom(2), "big") & 0x3FF
        else:
            _counter += 1
            if _counter > 0xFFF:
                _last_ms += 1
                _counter = 0
            ms = _last_ms
        counter = _counter
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= counter << 64
    value |= 0b10 << 62
    value |= rand
    return UUID(int=value)


def uuid7_time_ms(value: UUID) -> int:
    """Return the unix timestamp in milliseconds encoded in a UUIDv7."""
    if value.version != 7:
        raise ValueError(f"{value} is not a UUIDv7")
    return value.int >> 80


__all__ = ["uuid7", "uuid7_time_ms"]
