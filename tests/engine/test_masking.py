"""Masking in the read surfaces: ``scheduler.detail()`` and ``ratchet jobs show/list`` replace
sensitive fields (password, token, ... and a job's own ``ratchet.mask_fields``) with ``***``,
on every store, with and without encryption; stored values and the job's execution are
unchanged."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ratchet_api.errors import InvalidJobError
from ratchet_api.model import JobInvocation, JobStatus, MaskingContext
from ratchet_core.defaults.security import DefaultPayloadMaskingPolicy
from ratchet_core.payload.masking import MASK, PayloadMasker
from tests.engine import secret_targets
from tests.engine.conftest import build_container, migrate

RATCHET = Path(sys.executable).with_name("ratchet")
REPO = Path(__file__).resolve().parents[2]
SECRET = "hunter2"


def enqueue_login(scheduler: Any) -> Any:
    return (
        scheduler.job(secret_targets.login)
        .args("alice", SECRET, {"api_token": "t0k", "city": "Oslo"})
        .kwargs(iban="NO93 8601 1117 947")
        .property("ratchet.mask_fields", "iban")
        .enqueue()
    )


def check_masked(detail: Any) -> None:
    assert detail.masked
    assert detail.args == ("alice", MASK, {"api_token": MASK, "city": "Oslo"})
    assert detail.kwargs == {"iban": MASK}
    assert detail.result["session_token"] == MASK
    assert detail.result["iban"] == MASK and detail.result["user"] == "alice"
    assert detail.properties == {"ratchet.mask_fields": "iban"}
    assert SECRET not in repr(detail)


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_detail_masks_sensitive_fields_and_per_job_properties(
    store_url: str, make_worker: Any, encrypted: bool
) -> None:
    settings: dict[str, str] = {"security.mask_payloads": "true"}
    if encrypted:
        settings["encryption.keys"] = f"k1:{base64.b64encode(os.urandom(32)).decode()}"
    container = build_container(store_url, **settings)
    store = container.job_store()
    migrate(store)
    scheduler = container.scheduler()
    job_id = enqueue_login(scheduler)
    make_worker(container).run_until_idle(20)
    detail = scheduler.detail(job_id)
    assert detail is not None and detail.status is JobStatus.SUCCEEDED
    assert detail.encrypted is encrypted
    check_masked(detail)
    # the job itself received and returned the real values
    assert scheduler.result(job_id).value["session_token"] == f"tok-{SECRET}"


def test_without_masking_detail_shows_the_decrypted_values(
    store_url: str, make_worker: Any
) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    container = build_container(store_url, **{"encryption.keys": f"k1:{key}"})
    migrate(container.job_store())
    scheduler = container.scheduler()
    job_id = enqueue_login(scheduler)
    make_worker(container).run_until_idle(20)
    detail = scheduler.detail(job_id)
    assert detail is not None and not detail.masked
    assert detail.args == ("alice", SECRET, {"api_token": "t0k", "city": "Oslo"})
    assert SECRET not in scheduler.get(job_id).payload  # the stored row stays sealed


def test_properties_are_write_once_and_validated_at_the_builder(sqlite_url: str) -> None:
    container = build_container(sqlite_url)
    migrate(container.job_store())
    builder = container.scheduler().job(secret_targets.echo_secret).property("a", "1")
    with pytest.raises(InvalidJobError, match="already set"):
        builder.property("a", "2")
    with pytest.raises(InvalidJobError, match="must be a string"):
        builder.property("b", 3)  # type: ignore[arg-type]


def test_masker_maps_positional_arguments_to_parameter_names() -> None:
    masker = PayloadMasker(DefaultPayloadMaskingPolicy(), enabled=True)
    invocation = JobInvocation(
        module="m",
        qualname="f",
        signature="(user: str, password: str, *extra: Any, ctx: JobContext, **kw: Any)",
        args=("u", "p", {"nested": {"secret": 1, "ok": 2}}, "x"),
        kwargs={"token": "t", "n": [{"pin": 1234}]},
    )
    context = MaskingContext(job_id=__import__("uuid").uuid4())
    args, kwargs = masker.mask_arguments(invocation, context)
    assert args == ["u", MASK, {"nested": {"secret": MASK, "ok": 2}}, "x"]
    assert kwargs == {"token": MASK, "n": [{"pin": MASK}]}
    off = PayloadMasker(DefaultPayloadMaskingPolicy(), enabled=False)
    assert off.mask_arguments(invocation, context) == (
        list(invocation.args),
        dict(invocation.kwargs),
    )


def ratchet(*args: str, env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    env["RATCHET_SECURITY_ALLOWED_PACKAGES"] = "tests."
    env.pop("RATCHET_STORE_URL", None)
    env.update(env_extra)
    return subprocess.run(
        [str(RATCHET), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
        check=False,
    )


def test_ratchet_jobs_show_and_list_mask_with_masking_on(sqlite_url: str, make_worker: Any) -> None:
    key = f"k1:{base64.b64encode(os.urandom(32)).decode()}"
    container = build_container(sqlite_url, **{"encryption.keys": key})
    migrate(container.job_store())
    job_id = enqueue_login(container.scheduler())
    make_worker(container).run_until_idle(20)
    env = {"RATCHET_ENCRYPTION_KEYS": key, "RATCHET_SECURITY_MASK_PAYLOADS": "true"}

    shown = ratchet("jobs", "show", str(job_id), "--json", "--url", sqlite_url, env_extra=env)
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    assert record["args"] == ["alice", MASK, {"api_token": MASK, "city": "Oslo"}]
    assert record["kwargs"] == {"iban": MASK}
    assert record["result"]["session_token"] == MASK and record["encrypted"] is True
    table = ratchet("jobs", "show", str(job_id), "--url", sqlite_url, env_extra=env)
    listed = ratchet("jobs", "list", "--url", sqlite_url, env_extra=env)
    listed_json = ratchet("jobs", "list", "--json", "--url", sqlite_url, env_extra=env)
    for out in (shown, table, listed, listed_json):
        assert out.returncode == 0, out.stderr
        assert SECRET not in out.stdout and "$rx$" not in out.stdout

    unmasked = ratchet(
        "jobs", "show", str(job_id), "--json", "--url", sqlite_url,
        env_extra={"RATCHET_ENCRYPTION_KEYS": key},
    )  # fmt: skip
    assert json.loads(unmasked.stdout)["args"][1] == SECRET

    # the short alias of security.mask_payloads (the spelling of issue 13)
    alias = {"RATCHET_ENCRYPTION_KEYS": key, "RATCHET_MASK_PAYLOADS": "true"}
    aliased = ratchet("jobs", "show", str(job_id), "--json", "--url", sqlite_url, env_extra=alias)
    assert aliased.returncode == 0, aliased.stderr
    assert json.loads(aliased.stdout)["args"] == [
        "alice",
        MASK,
        {"api_token": MASK, "city": "Oslo"},
    ]
    assert SECRET not in aliased.stdout
