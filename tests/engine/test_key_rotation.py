"""Key rotation on every store (in process) and through the ``ratchet keys`` command line on
SQLite with 10,000 jobs: values are re-encrypted under the current key in batches, old-key
values stay readable while it runs, and jobs enqueued before the rotation run after it with
only the new key configured."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from ratchet_api.model import JobStatus
from ratchet_api.store.protocols import JobExtensionStore
from ratchet_core.payload.encryption import parse_keys
from ratchet_core.payload.rotation import key_status, rotate
from tests.engine import secret_targets
from tests.engine.conftest import build_container, migrate
from tests.engine.raw_rows import dump, read_column

RATCHET = Path(sys.executable).with_name("ratchet")
REPO = Path(__file__).resolve().parents[2]


def b64() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def container_with(store_url: str, keys: str, current: str) -> Any:
    container = build_container(
        store_url, **{"encryption.keys": keys, "encryption.current_key_id": current}
    )
    migrate(container.job_store())
    return container


def test_rotation_rewrites_every_surface_and_old_jobs_run_after_it(
    store_url: str, make_worker: Any
) -> None:
    old_id, new_id = f"old-{uuid.uuid4().hex[:8]}", f"new-{uuid.uuid4().hex[:8]}"
    old, new = f"{old_id}:{b64()}", f"{new_id}:{b64()}"
    marker = f"rot-{uuid.uuid4().hex}"

    before = container_with(store_url, old, old_id)
    done = before.scheduler().enqueue(secret_targets.keep_secret, marker, {"user": "u"})
    make_worker(before).run_until_idle(20)
    waiting = [
        before.scheduler().enqueue(secret_targets.echo_secret, f"{marker}-{i}") for i in range(30)
    ]
    mine = {done, *waiting}

    during = container_with(store_url, f"{old},{new}", new_id)
    store = during.job_store()
    partial = rotate(store, during.payload_codec(), batch_size=10, max_batches=1)
    assert partial.batches == 1 and partial.last_job_id is not None
    # old-key values are still readable in the middle of the rotation
    assert during.scheduler().result(done).value["token"] == f"{marker}-result"
    rest = rotate(store, during.payload_codec(), batch_size=10, after=partial.last_job_id)
    assert not [f for f in partial.failures + rest.failures if f[0] in mine]

    for job_id in mine:
        for column in ("payload", "result"):
            text = read_column(store, job_id, column)
            assert text is None or text.startswith(f"$rx$1$AES-256-GCM${new_id}$"), text
    counts = key_status(store)
    assert old_id not in counts
    assert counts[new_id]["state"] >= 1 and counts[new_id]["payload"] >= len(mine)

    after = container_with(store_url, new, new_id)
    make_worker(after).run_until_idle(30)
    scheduler = after.scheduler()
    for i, job_id in enumerate(waiting):
        outcome = scheduler.result(job_id)
        assert outcome.status is JobStatus.SUCCEEDED, outcome
        assert outcome.value == f"{marker}-{i}-result"
    assert scheduler.result(done).value["token"] == f"{marker}-result"
    ext = after.job_store().capability(JobExtensionStore)
    assert ext is not None
    state = ext.get_state(done, "progress")
    assert state is not None and state.json.startswith(f"$rx$1$AES-256-GCM${new_id}$")
    assert marker not in dump(after.job_store())


def ratchet(*args: str, keys: str, current: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    env["RATCHET_ENCRYPTION_KEYS"] = keys
    env["RATCHET_ENCRYPTION_CURRENT_KEY_ID"] = current
    env.pop("RATCHET_STORE_URL", None)
    return subprocess.run(
        [str(RATCHET), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
        check=False,
    )


def test_keys_cli_generates_rotates_ten_thousand_jobs_resumably_and_reports_status(
    tmp_path: Path, make_worker: Any
) -> None:
    generated = ratchet("keys", "generate", "--id", "k2", keys="", current="")
    assert generated.returncode == 0, generated.stderr
    assert set(parse_keys(generated.stdout.strip())) == {"k2"}
    assert "ratchet keys rotate" in generated.stderr
    bad = ratchet("keys", "generate", "--id", "a$b", keys="", current="")
    assert bad.returncode != 0 and "--id" in bad.stderr

    url = f"sqlite:///{tmp_path / 'keys.db'}"
    k1 = f"k1:{b64()}"
    keys = f"{k1},{generated.stdout.strip()}"
    before = container_with(url, k1, "k1")
    ids = before.scheduler().enqueue_many(
        secret_targets.echo_secret, [(f"n{i}",) for i in range(10_000)]
    )

    status = ratchet("keys", "status", "--json", "--url", url, keys=keys, current="k2")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout) == {
        "current_key_id": "k2",
        "archive_covered": True,
        "keys": {"k1": {"payload": 10000}},
    }

    first = ratchet(
        "keys", "rotate", "--batch-size", "1000", "--max-batches", "4", "--url", url,
        keys=keys, current="k2",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert "4000 re-encrypted" in first.stdout
    assert "archived jobs: not reached yet" in first.stdout
    last = first.stdout.strip().splitlines()[-1].removeprefix("last job id: ")
    assert uuid.UUID(last) == ids[3999]
    halfway = json.loads(
        ratchet("keys", "status", "--json", "--url", url, keys=keys, current="k2").stdout
    )
    assert halfway["keys"] == {"k1": {"payload": 6000}, "k2": {"payload": 4000}}

    resumed = ratchet(
        "keys", "rotate", "--batch-size", "1000", "--after", last, "--url", url,
        keys=keys, current="k2",
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert "6000 values scanned, 6000 re-encrypted" in resumed.stdout
    assert "archived jobs: 0 values scanned" in resumed.stdout
    table = ratchet("keys", "status", "--url", url, keys=keys, current="k2")
    assert table.returncode == 0 and "k2 (current)" in table.stdout and "k1" not in table.stdout

    after = container_with(url, generated.stdout.strip(), "k2")  # k1 is gone
    stats = make_worker(after, concurrency=8, prefetch=64).run_until_idle(120)
    assert stats.idle
    scheduler = after.scheduler()
    for index in (0, 4321, 9999):
        assert scheduler.result(ids[index]).value == f"n{index}-result"


def test_a_wrapped_key_from_the_cli_encrypts_jobs_through_a_wrapped_key_provider(
    tmp_path: Path, make_worker: Any
) -> None:
    from dependency_injector import providers

    from ratchet_api.priority import Priority
    from ratchet_api.spi import KeyProvider
    from ratchet_core.payload.keys import LocalKeyWrapper, UnwrappingKeyProvider

    wrapping = b64()
    env_name = "RATCHET_TEST_WRAPPING_KEY"
    os.environ[env_name] = wrapping
    try:
        out = ratchet(
            "keys", "generate", "--id", "dk1", "--wrapping-key-env", env_name, keys="", current=""
        )
    finally:
        del os.environ[env_name]
    assert out.returncode == 0, out.stderr
    key_id, wrapped = next(iter(parse_keys_raw(out.stdout.strip()).items()))
    provider = UnwrappingKeyProvider(LocalKeyWrapper(base64.b64decode(wrapping)), {key_id: wrapped})
    container = build_container(
        f"sqlite:///{tmp_path / 'wrapped.db'}", **{"encryption.mode": "all"}
    )
    container.alternatives.register(
        KeyProvider, providers.Object(provider), priority=Priority.APPLICATION
    )
    container.build()
    migrate(container.job_store())
    job_id = container.scheduler().enqueue(secret_targets.echo_secret, "wrapped-secret")
    assert read_column(container.job_store(), job_id, "payload").startswith(
        "$rx$1$AES-256-GCM$dk1$"
    )
    make_worker(container).run_until_idle(20)
    assert container.scheduler().result(job_id).value == "wrapped-secret-result"


def parse_keys_raw(text: str) -> dict[str, bytes]:
    key_id, _, encoded = text.partition(":")
    return {key_id: base64.b64decode(encoded)}
