"""Signal handlers of ``manage.py ratchet_worker`` from the moment Django imports this app.

Django imports the installed apps (``django.setup()``) before it even looks the management
command up, and a project's apps can take a while to import. A SIGTERM meanwhile would find
Python's default handler and end the worker with -15; so, when the process is
``manage.py ratchet_worker`` (``sys.argv[1]``, the subcommand Django runs), the handlers of
:class:`~ratchet_core.runtime.process_signals.WorkerSignals` are installed as this package is imported
(standard library only), and the command takes them over.
"""

from __future__ import annotations

import signal
import sys

from ratchet_core.runtime.process_signals import WorkerSignals

COMMAND = "ratchet_worker"

SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGQUIT") if hasattr(signal, name)
)
"""The signals ``db_worker`` stops on."""

_early: WorkerSignals | None = None


def exit_zero(signum: int) -> int:
    """``db_worker``'s exit code after a second signal (0)."""
    return 0


def worker_signals() -> WorkerSignals:
    """The ``manage.py ratchet_worker`` handlers: those installed early (taken over: a later
    call gets new ones), or new ones."""
    global _early
    signals, _early = _early, None
    if signals is None:
        signals = WorkerSignals(second_exit_code=exit_zero, signals=SIGNALS)
    return signals


def install_if_worker(argv: list[str]) -> None:
    """Install the worker's handlers now when ``argv`` runs ``ratchet_worker`` (main thread)."""
    global _early
    if len(argv) > 1 and argv[1] == COMMAND and _early is None:
        _early = WorkerSignals(second_exit_code=exit_zero, signals=SIGNALS).install()


install_if_worker(sys.argv)

__all__ = ["COMMAND", "SIGNALS", "install_if_worker", "worker_signals"]
