"""A worker imports only what it uses (issue 18): with every extra installed, importing the
engine, the CLI and the SQL store loads no web framework and no Alembic, and dependency-injector's
wiring still recognises the frameworks' markers once the application imports them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

FRAMEWORKS = ("flask", "django", "fastapi", "starlette", "werkzeug", "alembic", "mako")


def _run(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def test_engine_cli_and_sql_store_import_no_framework_and_no_alembic() -> None:
    out = _run(
        f"""
        import importlib.util, sys
        for name in {FRAMEWORKS!r}:
            assert importlib.util.find_spec(name) is not None, name + " is not installed"
        import ratchet_core, ratchet_core.cli, ratchet_core.worker, ratchet_core.enqueue.scheduler
        import ratchet_store_sql
        loaded = [n for n in {FRAMEWORKS!r} if n in sys.modules]
        # dependency-injector looks pydantic up only for pydantic_settings / pydantic 1
        if importlib.util.find_spec("pydantic_settings") is None and "pydantic" in sys.modules:
            loaded.append("pydantic")
        print(sorted(loaded))
        """
    )
    assert out == "[]"


def test_fastapi_depends_markers_are_still_wired_when_the_app_imports_fastapi_later() -> None:
    out = _run(
        """
        import ratchet_core  # first: dependency-injector is imported without FastAPI
        from dependency_injector import containers, providers
        from dependency_injector.wiring import Provide, inject
        from fastapi import Depends

        class Box(containers.DeclarativeContainer):
            greeting = providers.Object("hello")

        @inject
        def handler(value: str = Depends(Provide[Box.greeting])) -> str:
            return value

        box = Box()
        box.wire(modules=[__name__])
        print(handler())
        """
    )
    assert out == "hello"


WORKER_NEVER_LOADS = (
    "cryptography",
    "croniter",
    "rich",
    "wsgiref",
    "ratchet_core.dashboard",
    # a SQLite worker loads SQLAlchemy's SQLite dialect only (issue 23)
    "sqlalchemy.dialects.postgresql",
    "sqlalchemy.dialects.mysql",
)


def test_a_burst_worker_without_encryption_or_cron_loads_no_crypto_cron_rich_or_http_server(
    tmp_path: Path,
) -> None:
    db = tmp_path / "lean.db"
    url = f"sqlite:///{db}"
    seed = f"""
        from ratchet_core.runtime.container import RatchetContainer
        from ratchet_api.store import SchemaManager
        c = RatchetContainer(overrides={{"store.url": {url!r}, "security.allowed_packages": "tests."}})
        c.job_store().capability(SchemaManager).upgrade()
        from tests.engine.targets import noop
        print(c.scheduler().enqueue(noop))
        """
    job_id = _run(seed)
    report = tmp_path / "modules.txt"
    run_worker = f"""
        import atexit, sys
        def report():
            with open({str(report)!r}, "w") as out:
                out.write(" ".join(sorted(sys.modules)))
        atexit.register(report)
        sys.argv = ["ratchet", "--set", "store.url={url}", "--set",
                    "security.allowed_packages=tests.", "worker", "--burst", "--no-status"]
        from ratchet_core.cli import main
        main()
        """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(run_worker)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    loaded = set(report.read_text().split())
    assert "ratchet_core.worker" in loaded and "ratchet_store_sql" in loaded
    assert (
        sorted(
            m for m in loaded if any(m == n or m.startswith(n + ".") for n in WORKER_NEVER_LOADS)
        )
        == []
    )
    check = f"""
        from ratchet_core.runtime.container import RatchetContainer
        c = RatchetContainer(overrides={{"store.url": {url!r}, "security.allowed_packages": "tests."}})
        from uuid import UUID
        print(c.scheduler().get(UUID({job_id!r})).status.value)
        """
    assert _run(check) == "SUCCEEDED"


def test_the_worker_command_limits_glibc_malloc_arenas_as_configured() -> None:
    from ratchet_core.cli.worker import limit_malloc_arenas

    assert limit_malloc_arenas(0) is False  # 0 keeps glibc's default
    if sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION"):
        assert limit_malloc_arenas(2) is True
