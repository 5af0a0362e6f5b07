"""Retry decisions bound to a job's values, and the fenced JobContext state."""

from __future__ import annotations

from datetime import timedelta

from ratchet_api.model import BackoffPolicy, JobLoggerContext, JobStatus
from ratchet_api.store.protocols import JobExtensionStore
from ratchet_core.defaults.retry import DefaultRetryPolicy
from ratchet_core.worker.context import RunningJobContext
from ratchet_core.worker.retry import decide_retry
from tests.engine import targets
from tests.engine.conftest import build_container, migrate


def test_default_policy_retries_while_attempts_stay_within_max_retries() -> None:
    policy = DefaultRetryPolicy()
    fixed = BackoffPolicy.fixed(7)
    decisions = [
        decide_retry(policy, attempt=n, max_retries=2, backoff=fixed, cause=OSError())
        for n in (1, 2, 3)
    ]
    assert [d.delay for d in decisions] == [timedelta(seconds=7), timedelta(seconds=7), None]


def test_exponential_backoff_with_jitter_stays_between_half_and_full_delay() -> None:
    backoff = BackoffPolicy.exponential(1.0, multiplier=2.0, maximum=5.0, jitter=True)
    for attempt, full in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (9, 5.0)):
        for _ in range(50):
            d = decide_retry(
                DefaultRetryPolicy(),
                attempt=attempt,
                max_retries=10,
                backoff=backoff,
                cause=OSError(),
            ).delay
            assert d is not None and full / 2 <= d.total_seconds() <= full


def test_an_override_without_bind_decides_alone() -> None:
    class OnlyIo:
        def should_retry(self, attempt: int, cause: BaseException) -> bool:
            return isinstance(cause, OSError)

        def get_delay(self, attempt: int) -> timedelta:
            return timedelta(seconds=-3)  # a negative delay is clamped to zero

    assert decide_retry(
        OnlyIo(), attempt=50, max_retries=0, backoff=None, cause=OSError()
    ).delay == timedelta(0)
    assert (
        decide_retry(OnlyIo(), attempt=1, max_retries=9, backoff=None, cause=ValueError()).delay
        is None
    )


def test_a_policy_that_raises_dead_letters_instead_of_losing_the_job() -> None:
    class Broken:
        def should_retry(self, attempt: int, cause: BaseException) -> bool:
            raise RuntimeError("bug")

        def get_delay(self, attempt: int) -> timedelta:
            return timedelta(0)

    assert not decide_retry(Broken(), attempt=1, max_retries=3, backoff=None, cause=OSError()).retry


def test_context_state_writes_are_fenced_by_the_claim(sqlite_url: str) -> None:
    container = build_container(sqlite_url)
    store = container.job_store()
    migrate(store)
    extension = store.capability(JobExtensionStore)
    assert extension is not None
    job_id = container.scheduler().enqueue(targets.add, 1, 2)
    (claimed,) = [j for j in store.claim_next_batch("n1", 10) if j.id == job_id]
    ctx = RunningJobContext(
        job_id=job_id,
        attempt=claimed.attempt,
        claim_seq=claimed.claim_seq,
        logger=container.job_logger_factory().create(
            JobLoggerContext(job_id=job_id, target=claimed.target, attempt=1, node_id="n1")
        ),
        extension_store=extension,
        serializer=container.payload_serializer(),
    )
    assert ctx.get_state("progress") is None
    assert ctx.set_state("progress", {"done": 1})
    assert ctx.set_state("progress", {"done": 2})
    assert ctx.get_state("progress") == {"done": 2}
    assert store.cancel_job(job_id)
    assert store.find_by_id(job_id).status is JobStatus.CANCELLED
    assert ctx.set_state("progress", {"done": 3}) is False
    assert ctx.get_state("progress") == {"done": 2}
    store.close()
