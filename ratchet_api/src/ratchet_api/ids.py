"""Job ids: UUID version 7 (time ordered, so ids sort by creation time)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any
from uuid import UUID

_lock = threading.Lock()
_last_ms = 0
_counter = 0
_POOL_SIZE = 4096
_pool = b""
_pool_at = 0


def _random(n: int) -> bytes:
    """``n`` bytes from ``os.urandom``, drawn 4 KiB at a time (call with ``_lock`` held): one
    system call per few hundred ids instead of two per id (each releases the GIL, which a busy
    multi-threaded worker then waits to get back)."""
    global _pool, _pool_at
    if n > _POOL_SIZE:
        return os.urandom(n)
    if _pool_at + n > len(_pool):
        _pool, _pool_at = os.urandom(_POOL_SIZE), 0
    start = _pool_at
    _pool_at += n
    return _pool[start:_pool_at]


def _forget_pool() -> None:
    """A forked child must never reuse the random bytes its parent will also use."""
    global _pool, _pool_at, _lock
    _pool, _pool_at, _lock = b"", 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


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
            _counter = int.from_bytes(_random(2), "big") & 0x3FF
        else:
            _counter += 1
            if _counter > 0xFFF:
                _last_ms += 1
                _counter = 0
            ms = _last_ms
        counter = _counter
        rand = int.from_bytes(_random(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= counter << 64
    value |= 0b10 << 62
    value |= rand
    return UUID(int=value)


def uuid7_many(count: int) -> list[UUID]:
    """``count`` new UUIDv7s in increasing order, as ``count`` calls of :func:`uuid7` would give
    (monotonic with every other id of this process), for the price of one: the clock is read,
    the lock taken and the random bytes drawn once for all of them (bulk enqueue)."""
    global _last_ms, _counter
    if count <= 0:
        return []
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms > _last_ms:
            _last_ms = ms
            _counter = (int.from_bytes(_random(2), "big") & 0x3FF) - 1
        stamps: list[int] = []
        append = stamps.append
        last, counter = _last_ms, _counter
        for _ in range(count):
            counter += 1
            if counter > 0xFFF:
                last += 1
                counter = 0
            append(((last & _MS_MASK) << 80) | _VERSION_BITS | (counter << 64) | _VARIANT_BITS)
        _last_ms, _counter = last, counter
        noise = _random(8 * count)
    new, set_int = UUID.__new__, _UUID_INT.__set__
    out: list[UUID] = []
    for index, stamp in enumerate(stamps):
        rand = int.from_bytes(noise[8 * index : 8 * index + 8], "big") & _RAND_MASK
        value = new(UUID)
        set_int(value, stamp | rand)
        _UUID_SAFE.__set__(value, _SAFE_UNKNOWN)
        out.append(value)
    return out


_MS_MASK = (1 << 48) - 1
_RAND_MASK = (1 << 62) - 1
_VERSION_BITS = 0x7 << 76
_VARIANT_BITS = 0b10 << 62
# UUID(int=...) checks the range and sets two slots; the values above are in range by
# construction, so uuid7_many sets the slots directly (a third of the cost per id).
_UUID_INT: Any = UUID.__dict__["int"]
_UUID_SAFE: Any = UUID.__dict__["is_safe"]
_SAFE_UNKNOWN = UUID(int=0).is_safe


def uuid7_time_ms(value: UUID) -> int:
    """Return the unix timestamp in milliseconds encoded in a UUIDv7."""
    if value.version != 7:
        raise ValueError(f"{value} is not a UUIDv7")
    return value.int >> 80


__all__ = ["uuid7", "uuid7_many", "uuid7_time_ms"]
