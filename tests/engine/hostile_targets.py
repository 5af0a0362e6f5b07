"""Job targets of the hostile-input tests (issue 26). This module is inside the tests'
allowlist (``tests.``) and imports functions of the standard library into its namespace: a row
rewritten to ``tests.engine.hostile_targets:rmtree`` names an allowed path that reaches
``shutil.rmtree``, which must never run."""

from __future__ import annotations

import subprocess
from pathlib import Path
from shutil import rmtree
from subprocess import check_output

from ratchet_api.scheduler import JobContext


def touch(path: str) -> str:
    """The legitimate target: create ``path``."""
    Path(path).touch()
    return path


def raise_message(message: str) -> None:
    """Fail with ``message`` as the exception's text."""
    raise RuntimeError(message)


def raise_chained(inner: str, outer: str) -> None:
    """Fail with ``outer`` caused by an error whose text is ``inner``."""
    try:
        raise ValueError(inner)
    except ValueError as exc:
        raise RuntimeError(outer) from exc


def log_line(line: str, context: JobContext) -> None:
    """Write ``line`` through the job's logger."""
    context.logger.info(line)


def log_lines(count: int, context: JobContext) -> None:
    """Write ``count`` lines through the job's logger."""
    for index in range(count):
        context.logger.info(f"line {index}")


def raise_big(size: int, secret: str) -> None:
    """Fail with a message of ``size`` characters that ends with ``secret``."""
    raise RuntimeError("x" * size + " password=" + secret)


def echo(value: object) -> object:
    return value


def big_result(size: int) -> str:
    return "x" * size


class Borrowed(subprocess.Popen[bytes]):
    """A class of the allowed package whose methods are inherited from ``subprocess``."""


__all__ = ["Borrowed", "check_output", "rmtree", "touch"]
