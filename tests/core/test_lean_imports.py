"""A worker imports only what it uses (issue 18): with every extra installed, importing the
engine, the CLI and the SQL store loads no web framework and no Alembic, and dependency-injector's
wiring still recognises the frameworks' markers once the application imports them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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
        import ratchet_core, ratchet_core.cli, ratchet_core.worker, ratchet_core.scheduler
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
