"""A row of the jobs table is input too (issue 26): someone who can write to the table (a
compromised application account, an injection elsewhere, a restored backup) must not be able to
run anything the allowlist does not allow. Each test rewrites a stored job behind Ratchet's back
and checks that a marker (a file that must not appear, a directory that must survive) is left
alone and the job is dead-lettered with an error that says why. SQLite and PostgreSQL."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ratchet_api.errors import ClassNotAllowedError, InvalidTargetError
from ratchet_api.model import JobInvocation, JobStatus
from ratchet_core.enqueue.invocation import signature_text
from ratchet_core.payload.forms import encode_invocation
from tests.conftest import backend_url
from tests.engine import hostile_targets
from tests.engine.conftest import build_container, migrate
from tests.engine.raw_rows import write_column

HOSTILE = hostile_targets.__name__


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str:
    return backend_url(request, request.param)


@pytest.fixture
def container(store_url: str) -> Iterator[Any]:
    made = build_container(store_url)
    store = made.job_store()
    migrate(store)
    try:
        yield made
    finally:
        store.close()


def rewrite(container: Any, job_id: uuid.UUID, invocation: JobInvocation, column: str) -> None:
    """What an attacker with write access does: a well-formed payload naming ``invocation``
    and the ``target`` column set to ``column``."""
    store = container.job_store()
    write_column(store, job_id, "payload", encode_invocation(invocation))
    write_column(store, job_id, "target", column)


def parked_job(container: Any, tmp_path: Path) -> uuid.UUID:
    """A legitimate job (``touch`` of a file nobody checks), not yet run."""
    return container.scheduler().enqueue(hostile_targets.touch, str(tmp_path / "legit"))  # type: ignore[no-any-return]


def dead_letter(container: Any, make_worker: Any, job_id: uuid.UUID) -> str:
    """Run a worker until idle; the job must be FAILED (dead letter, never retried): its error."""
    make_worker(container).run_until_idle(30)
    result = container.scheduler().result(job_id)
    assert result.status is JobStatus.FAILED, result
    assert container.job_store().find_by_id(job_id).attempt <= 1
    return str(result.error)


def std_signature(function: Any) -> str:
    import inspect

    return signature_text(list(inspect.signature(function).parameters.values()))


def test_an_imported_function_of_an_allowed_module_never_runs(
    container: Any, make_worker: Any, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "data").write_text("keep me")
    job_id = parked_job(container, tmp_path)
    forged = JobInvocation(
        module=HOSTILE,
        qualname="rmtree",
        signature=std_signature(hostile_targets.rmtree),  # a careful attacker gets it right
        args=(str(victim),),
    )
    rewrite(container, job_id, forged, forged.target)
    error = dead_letter(container, make_worker, job_id)
    assert victim.is_dir() and (victim / "data").read_text() == "keep me"
    assert "shutil.rmtree" in error and "defined" in error


def test_subprocess_imported_into_an_allowed_module_never_runs(
    container: Any, make_worker: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    job_id = parked_job(container, tmp_path)
    forged = JobInvocation(
        module=HOSTILE,
        qualname="check_output",
        signature=std_signature(hostile_targets.check_output),
        args=(["touch", str(marker)],),
    )
    rewrite(container, job_id, forged, forged.target)
    error = dead_letter(container, make_worker, job_id)
    assert not marker.exists()
    assert "subprocess.check_output" in error


def test_a_payload_without_its_recorded_signature_never_runs(
    container: Any, make_worker: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "unsigned"
    job_id = parked_job(container, tmp_path)
    forged = JobInvocation(module=HOSTILE, qualname="touch", signature="", args=(str(marker),))
    rewrite(container, job_id, forged, forged.target)
    error = dead_letter(container, make_worker, job_id)
    assert not marker.exists()
    assert "no recorded signature" in error


def test_a_payload_naming_another_target_than_the_row_never_runs(
    container: Any, make_worker: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "hidden"
    job_id = container.scheduler().enqueue(hostile_targets.echo, "harmless")
    touch = container.scheduler().resolve_job(hostile_targets.touch, [str(marker)], {})
    # the payload runs touch, the column (what `ratchet jobs list` shows) still says echo
    rewrite(container, job_id, touch, f"{HOSTILE}:echo")
    error = dead_letter(container, make_worker, job_id)
    assert not marker.exists()
    assert "target column" in error and f"{HOSTILE}:echo" in error


_DIGITS_AS_LETTERS = str.maketrans("0123456789", "ghijklmnop")


def test_a_module_outside_the_allowlist_is_not_even_imported(
    container: Any, make_worker: Any, tmp_path: Path
) -> None:
    # letters only: a run of digits in a random hex name can look like a card number, which
    # the error sanitizer masks in the dead-letter message this test reads (a flaky failure)
    name = f"hostile_side_effect_{uuid.uuid4().hex.translate(_DIGITS_AS_LETTERS)}"
    marker = tmp_path / "imported"
    code = (
        f"from pathlib import Path\nPath({str(marker)!r}).touch()\n\ndef run() -> None:\n    pass\n"
    )
    (tmp_path / f"{name}.py").write_text(code)
    sys.path.insert(0, str(tmp_path))
    try:
        job_id = parked_job(container, tmp_path)
        forged = JobInvocation(module=name, qualname="run", signature="()")
        rewrite(container, job_id, forged, forged.target)
        error = dead_letter(container, make_worker, job_id)
    finally:
        sys.path.remove(str(tmp_path))
    assert not marker.exists(), "the refused module was imported (its top level ran)"
    assert name not in sys.modules
    assert f"{name}.run" in error and "not allowed" in error.lower()


def test_enqueue_invocation_refuses_what_the_worker_refuses(
    container: Any, make_worker: Any, tmp_path: Path
) -> None:
    service = container.invocation_submission_service()
    victim = tmp_path / "victim"
    victim.mkdir()
    forged = JobInvocation(
        module=HOSTILE,
        qualname="rmtree",
        signature=std_signature(hostile_targets.rmtree),
        args=(str(victim),),
    )
    with pytest.raises(InvalidTargetError, match=r"defined as shutil\.rmtree"):
        service.enqueue_invocation(forged).enqueue()
    with pytest.raises(ClassNotAllowedError, match=r"subprocess\.run"):
        service.enqueue_invocation(JobInvocation(module="subprocess", qualname="run")).enqueue()
    # an invocation submitted by name without a signature gets it recorded, so it runs
    marker = tmp_path / "by-name"
    job_id = service.enqueue_invocation(
        JobInvocation(module=HOSTILE, qualname="touch", args=(str(marker),))
    ).enqueue()
    stored = container.scheduler().resolve_job(hostile_targets.touch, [str(marker)], {})
    assert stored.signature
    make_worker(container).run_until_idle(30)
    assert container.scheduler().result(job_id).status is JobStatus.SUCCEEDED
    assert marker.exists() and victim.is_dir()


def test_an_inherited_method_is_judged_where_it_is_defined(container: Any) -> None:
    loader = container.target_loader()
    forged = JobInvocation(
        module=HOSTILE, qualname="Borrowed.communicate", static=False, signature="(input=...)"
    )
    with pytest.raises(InvalidTargetError, match=r"subprocess"):
        loader.load(forged)
