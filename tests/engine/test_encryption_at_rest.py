"""Encryption at rest on every store: with keys configured, the raw rows/documents hold no
plaintext of an encrypted job's arguments, result, state or error; a ciphertext moved to another
job's row is refused (dead letter + metric, nothing decrypted); unencrypted jobs keep working."""

from __future__ import annotations

import base64
import os
import threading
import uuid
from typing import Any

import pytest
from dependency_injector import providers

from ratchet_api.errors import EncryptionIntegrityError, InvalidJobError
from ratchet_api.model import JobStatus
from ratchet_api.priority import Priority
from ratchet_api.spi import MetricsCollector
from ratchet_api.store.protocols import JobAuditStore
from ratchet_core.defaults.metrics import NoOpMetricsCollector
from ratchet_core.payload.envelope import is_envelope, key_id_of
from tests.engine import secret_targets
from tests.engine.conftest import build_container, migrate
from tests.engine.raw_rows import dump, read_column, write_column


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


class RecordingMetrics(NoOpMetricsCollector):
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self._lock = threading.Lock()

    def encryption_integrity_violation(self, job_id: uuid.UUID, surface: str) -> None:
        with self._lock:
            self.calls.append(("integrity", (job_id, surface)))

    def encryption_envelope_version_skew(
        self, job_id: uuid.UUID, found: int, expected: int
    ) -> None:
        with self._lock:
            self.calls.append(("skew", (job_id, found, expected)))


@pytest.fixture
def secure(store_url: str) -> Any:
    """A container with one key (encryption.mode auto -> every job encrypted) and recorded
    encryption metrics."""
    container = build_container(store_url, **{"encryption.keys": f"k1:{new_key()}"})
    metrics = RecordingMetrics()
    container.alternatives.register(
        MetricsCollector, providers.Object(metrics), priority=Priority.APPLICATION
    )
    container.build()
    store = container.job_store()
    migrate(store)
    container.recorded = metrics
    try:
        yield container
    finally:
        store.close()


def test_stored_values_of_an_encrypted_job_hold_no_plaintext(secure: Any, make_worker: Any) -> None:
    # letters only: the marker is looked for in sanitized error messages, where a run of 13+
    # digits of a random hex string passing the Luhn check would be masked as a card number
    marker = "hunter2-" + uuid.uuid4().hex.translate(str.maketrans("0123456789", "ghijklmnop"))
    scheduler = secure.scheduler()
    ok_id = scheduler.enqueue(
        secret_targets.keep_secret, marker, {"user": "alice", "password": f"{marker}-arg"}
    )
    failed_id = scheduler.job(secret_targets.fail_with_secret).args(marker).max_retries(0).enqueue()
    logged_id = (
        scheduler.job(secret_targets.fail_with_context).args(marker).max_retries(0).enqueue()
    )
    store = secure.job_store()
    assert is_envelope(read_column(store, ok_id, "payload"))
    make_worker(secure).run_until_idle(30)

    result = scheduler.result(ok_id)
    assert result.status is JobStatus.SUCCEEDED, result
    assert result.value == {"token": f"{marker}-result", "user": "alice"}
    failure = scheduler.result(failed_id)
    assert failure.status is JobStatus.FAILED
    assert f"{marker}-error" in (failure.error or "")
    assert f"{marker}-logged-error" in (scheduler.result(logged_id).error or "")
    audit = store.capability(JobAuditStore)
    if audit is not None:
        lines = [line.message for line in audit.find_logs_by_job_id(logged_id)]
        assert any("RuntimeError (message stored encrypted" in line for line in lines), lines

    for column in ("payload", "result"):
        assert key_id_of(read_column(store, ok_id, column)) == "k1"
    assert key_id_of(read_column(store, failed_id, "last_error")) == "k1"
    raw = dump(store)
    assert str(ok_id) in raw or ok_id.hex in raw or "payload" in raw  # the dump sees the rows
    assert marker not in raw, "plaintext of an encrypted job found in the raw store"
    assert "secret_targets" in raw  # the target stays in clear (queries use it)


def test_without_keys_nothing_changes_and_encrypted_is_refused_at_the_builder(
    store_url: str, make_worker: Any
) -> None:
    container = build_container(store_url)
    store = container.job_store()
    migrate(store)
    try:
        scheduler = container.scheduler()
        job_id = scheduler.enqueue(secret_targets.echo_secret, "plain")
        assert not is_envelope(read_column(store, job_id, "payload"))
        with pytest.raises(InvalidJobError, match=r"'encrypted'.*encryption is off"):
            scheduler.job(secret_targets.echo_secret).encrypted()
        make_worker(container).run_until_idle(20)
        assert scheduler.result(job_id).value == "plain-result"
    finally:
        store.close()


def test_opt_in_mode_encrypts_only_jobs_built_with_encrypted(
    store_url: str, make_worker: Any
) -> None:
    container = build_container(
        store_url, **{"encryption.keys": f"k1:{new_key()}", "encryption.mode": "opt_in"}
    )
    store = container.job_store()
    migrate(store)
    try:
        scheduler = container.scheduler()
        plain = scheduler.enqueue(secret_targets.echo_secret, "p")
        sealed = scheduler.job(secret_targets.echo_secret).args("s").encrypted().enqueue()
        assert not is_envelope(read_column(store, plain, "payload"))
        assert is_envelope(read_column(store, sealed, "payload"))
        make_worker(container).run_until_idle(20)
        assert scheduler.result(plain).value == "p-result"
        assert scheduler.result(sealed).value == "s-result"
        assert not is_envelope(read_column(store, plain, "result"))
        assert is_envelope(read_column(store, sealed, "result"))
    finally:
        store.close()


def test_a_payload_copied_to_another_job_is_refused_and_dead_lettered(
    secure: Any, make_worker: Any
) -> None:
    scheduler = secure.scheduler()
    store = secure.job_store()
    source = scheduler.job(secret_targets.echo_secret).args("a").delay(3600).enqueue()
    victim = scheduler.enqueue(secret_targets.echo_secret, "b")
    write_column(store, victim, "payload", read_column(store, source, "payload"))

    make_worker(secure).run_until_idle(20)
    job = store.find_by_id(victim)
    assert job is not None and job.status is JobStatus.FAILED
    assert job.result is None
    assert "encryption integrity violation" in (job.last_error or "")
    assert "PAYLOAD" in (job.last_error or "")
    assert ("integrity", (victim, "PAYLOAD")) in secure.recorded.calls


def test_a_result_copied_to_another_job_fails_to_open(secure: Any, make_worker: Any) -> None:
    scheduler = secure.scheduler()
    store = secure.job_store()
    a = scheduler.enqueue(secret_targets.echo_secret, "a")
    b = scheduler.enqueue(secret_targets.echo_secret, "b")
    make_worker(secure).run_until_idle(20)
    write_column(store, b, "result", read_column(store, a, "result"))
    with pytest.raises(EncryptionIntegrityError, match=f"RESULT of job {b}"):
        scheduler.result(b)
    assert ("integrity", (b, "RESULT")) in secure.recorded.calls
    # a plaintext result forged into an encrypted job is refused too (no downgrade)
    write_column(store, b, "result", '"forged"')
    with pytest.raises(EncryptionIntegrityError, match="plaintext although the job is encrypted"):
        scheduler.result(b)
    # moved to another column of the same job: refused as well
    write_column(store, a, "last_error", read_column(store, a, "result"))
    write_column(store, a, "status", "FAILED")
    with pytest.raises(EncryptionIntegrityError, match="ERROR"):
        scheduler.result(a)


def test_a_newer_envelope_version_is_reported_as_skew(secure: Any, make_worker: Any) -> None:
    scheduler = secure.scheduler()
    store = secure.job_store()
    job_id = scheduler.enqueue(secret_targets.echo_secret, "x")
    payload = read_column(store, job_id, "payload")
    write_column(store, job_id, "payload", payload.replace("$rx$1$", "$rx$9$", 1))
    make_worker(secure).run_until_idle(20)
    job = store.find_by_id(job_id)
    assert job is not None and job.status is JobStatus.FAILED
    assert "envelope format 9" in (job.last_error or "")
    assert ("skew", (job_id, 9, 1)) in secure.recorded.calls


def test_xchacha20_poly1305_on_the_real_path_and_aes_values_stay_readable(
    store_url: str, make_worker: Any
) -> None:
    key = f"k1:{new_key()}"
    aes = build_container(store_url, **{"encryption.keys": key})
    migrate(aes.job_store())
    old = aes.scheduler().enqueue(secret_targets.echo_secret, "aes")
    xchacha = build_container(
        store_url, **{"encryption.keys": key, "encryption.algorithm": "xchacha20-poly1305"}
    )
    store = xchacha.job_store()
    new = xchacha.scheduler().enqueue(secret_targets.echo_secret, "xchacha")
    assert read_column(store, new, "payload").startswith("$rx$1$XCHACHA20-POLY1305$k1$")
    assert read_column(store, old, "payload").startswith("$rx$1$AES-256-GCM$k1$")
    make_worker(xchacha).run_until_idle(20)
    assert xchacha.scheduler().result(old).value == "aes-result"
    assert xchacha.scheduler().result(new).value == "xchacha-result"
    assert read_column(store, old, "result").startswith("$rx$1$XCHACHA20-POLY1305$k1$")
    store.close()
