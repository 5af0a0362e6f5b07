"""Job ids (``ratchet_api.ids.uuid7``) stay unique across threads and forked processes (ids are
drawn from a buffered pool of random bytes, which a forked child must not share)."""

from __future__ import annotations

import os
import sys
import threading
from uuid import UUID

import pytest

from ratchet_api.ids import uuid7, uuid7_time_ms


def test_ids_from_many_threads_are_unique_version_7_and_increasing_per_thread() -> None:
    results: list[list[UUID]] = [[] for _ in range(8)]

    def make(out: list[UUID]) -> None:
        out.extend(uuid7() for _ in range(5000))

    threads = [threading.Thread(target=make, args=(out,)) for out in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [u for out in results for u in out]
    assert len(set(every)) == len(every) == 40_000
    assert all(u.version == 7 and u.variant == "specified in RFC 4122" for u in every)
    for out in results:
        assert out == sorted(out)
        assert uuid7_time_ms(out[0]) <= uuid7_time_ms(out[-1])


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs os.fork")
def test_a_forked_child_never_repeats_the_ids_of_its_parent() -> None:
    uuid7()  # the parent has a partly used pool of random bytes
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report its next ids and exit without running pytest's teardown
        os.close(read)
        os.write(write, b"".join(uuid7().bytes for _ in range(200)))
        os._exit(0)
    os.close(write)
    parent = {uuid7() for _ in range(200)}
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    child = {UUID(bytes=data[i : i + 16]) for i in range(0, len(data), 16)}
    assert len(child) == 200
    assert not parent & child
    # the random tails differ too, not only the (shared) counters
    assert {u.int & ((1 << 62) - 1) for u in parent}.isdisjoint(
        {u.int & ((1 << 62) - 1) for u in child}
    )


def test_uuid7_many_gives_increasing_unique_ids_in_line_with_uuid7() -> None:
    from ratchet_api.ids import uuid7_many

    before = uuid7()
    batch = uuid7_many(10_000)  # past the 12-bit counter and the 4 KiB pool of random bytes
    after = uuid7()
    every = [before, *batch, after]
    assert len(batch) == 10_000 and every == sorted(every) and len(set(every)) == len(every)
    assert all(u.version == 7 and u.variant == "specified in RFC 4122" for u in batch)
    assert all(UUID(str(u)) == u and hash(UUID(str(u))) == hash(u) for u in batch[::97])
    # every id has its own 62 random bits (not a pool's worth reused or zero-filled)
    assert len({u.int & ((1 << 62) - 1) for u in batch}) == len(batch)
    assert uuid7_many(0) == []
