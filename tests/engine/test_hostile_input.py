"""Bad input is refused at enqueue with an ``InvalidArgumentError`` naming the field, before
anything reaches the store (issue 26): NaN, infinite and out-of-range delays and schedule times,
NUL bytes in keys, tags and execution targets, lone surrogates in arguments. Nothing is stored
for a refused job. SQLite and PostgreSQL (which refuses NUL bytes itself, where SQLite would
store them)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from ratchet_api.errors import InvalidArgumentError, InvalidJobError
from tests.engine import hostile_targets
from tests.engine.raw_rows import dump

Case = Callable[[Any, str], Any]

CASES: dict[str, tuple[str, Case]] = {
    "NaN delay": ("delay", lambda s, t: s.job(hostile_targets.echo).args(t).delay(float("nan"))),
    "infinite delay": ("delay", lambda s, t: s.schedule(float("inf"), hostile_targets.echo, t)),
    "huge delay": ("delay", lambda s, t: s.job(hostile_targets.echo).args(t).delay(1e300)),
    "huge timedelta": (
        "delay",
        lambda s, t: s.job(hostile_targets.echo).args(t).delay(timedelta(days=999_999_999)),
    ),
    "time beyond UTC": (
        "at",
        lambda s, t: (
            s.job(hostile_targets.echo)
            .args(t)
            .at(datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-12))))
        ),
    ),
    "year 1": (
        "at",
        lambda s, t: s.schedule(datetime(1, 1, 1, tzinfo=UTC), hostile_targets.echo, t),
    ),
    "NUL in idempotency key": (
        "idempotency_key",
        lambda s, t: s.job(hostile_targets.echo).args(t).idempotency_key(f"k\x00{t}"),
    ),
    "NUL in tag": ("tags", lambda s, t: s.job(hostile_targets.echo).args(t).tags(f"a\x00{t}")),
    "NUL in execution target": (
        "execution_target",
        lambda s, t: s.job(hostile_targets.echo).args(t).execution_target("gpu\x00"),
    ),
    "lone surrogate in an argument": (
        "argument #0",
        lambda s, t: s.enqueue(hostile_targets.echo, {"note": f"{t}\ud800"}),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_refused_at_enqueue_naming_the_field(sql_container: Any, case: str) -> None:
    scheduler = sql_container.scheduler()
    field, attempt = CASES[case]
    marker = uuid.uuid4().hex
    with pytest.raises(InvalidArgumentError) as info:
        builder = attempt(scheduler, marker)
        if builder is not None and not isinstance(builder, uuid.UUID):
            builder.enqueue()
    assert isinstance(info.value, InvalidJobError)  # existing handlers keep catching it
    assert info.value.field.startswith(field)
    assert field in str(info.value)
    assert marker not in dump(sql_container.job_store())  # nothing of the refused job was stored


def test_good_input_next_to_it_still_works(sql_container: Any) -> None:
    scheduler = sql_container.scheduler()
    at = datetime.now(UTC) + timedelta(days=365)
    job_id = scheduler.job(hostile_targets.echo).args("é ✓ 𝄞").tags("t-1").at(at).enqueue()
    assert scheduler.get(job_id).scheduled_at == at
