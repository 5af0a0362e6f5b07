"""``ratchet worker``: run a worker in the foreground until SIGTERM/SIGINT (or, with
``--burst``, until no due job is left)."""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import os
import sys
import time
from typing import Any

import attrs
import click

from ratchet_api.errors import RatchetError
from ratchet_core.runtime.process_signals import WorkerSignals


def _status_line(worker: Any, started: float) -> Any:
    from rich.text import Text

    s = worker.stats
    elapsed = time.monotonic() - started
    rate = s.succeeded / elapsed if elapsed > 0 else 0.0
    line = Text()
    line.append("ratchet worker ", style="bold")
    line.append(f"{worker.node_id}  ", style="dim")
    line.append(f"claimed {s.claimed}  ")
    line.append(f"running {s.running}  ", style="cyan")
    line.append(f"done {s.succeeded}  ", style="green")
    line.append(f"failed {s.failed}  ", style="red" if s.failed else "")
    line.append(f"retried {s.retried}  ", style="yellow" if s.retried else "")
    line.append(f"({rate:.0f}/s)", style="dim")
    return line


def _summary(stats: Any) -> str:
    return (
        f"claimed {stats.claimed}, succeeded {stats.succeeded}, failed {stats.failed}, "
        f"retried {stats.retried}, released {stats.released}, stale {stats.stale}, "
        f"abandoned {stats.abandoned}"
    )


def _console_handler() -> logging.Handler:
    if not sys.stderr.isatty():
        # Plain lines for log files and process managers (and no rich import: footprint).
        plain = logging.StreamHandler(sys.stderr)
        plain.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
        return plain
    from rich.logging import RichHandler

    handler = RichHandler(console=_stderr(), show_path=False, rich_tracebacks=True)
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler


_stderr_sink = [0]
"""Id of loguru's stderr sink: 0 (loguru's default) until :class:`LoguruToLogging` put it back."""


# the folders by role (0.3) are not part of logger names: ratchet_core.observability.metrics
# logs as ratchet.metrics and ratchet_core.features.recurring.sweeper as ratchet.recurring.sweeper,
# as they did when the modules sat on one floor
_ROLE_FOLDERS = ("enqueue.", "payload.", "features.", "observability.", "runtime.", "defaults.")


def logger_name(module: str) -> str:
    """The standard-logging name of a loguru record from ``module``: ``ratchet.<module>``
    without the ``ratchet_core`` package and its role folder."""
    if not module.startswith("ratchet_core."):
        return module
    rest = module[len("ratchet_core.") :]
    for folder in _ROLE_FOLDERS:
        if rest.startswith(folder):
            rest = rest[len(folder) :]
            break
    return f"ratchet.{rest}"


class LoguruToLogging:
    """A loguru sink that hands each record to the standard ``logging`` logger of the same
    module (``ratchet_core.x`` becomes ``ratchet.x``), so that a worker inside a framework logs
    every line once, in the format the application configured, instead of also on loguru's
    own stderr sink. A job's lines carry ``job_id``, ``attempt`` and ``target`` (as record
    attributes, and ``job ID:`` before the message). The worker's own note of a failed
    attempt in the job's log (``ratchet_core.worker.*``) is handed on at DEBUG: the
    ``ratchet.worker`` logger reports that failure already."""

    def __init__(self) -> None:
        self._sink_id: int | None = None
        self._removed_default = False

    def install(self) -> bool:
        """Replace loguru's default stderr sink by this one; True when done. An application
        that configured loguru itself (no default sink any more) keeps its sinks untouched."""
        from loguru import logger

        try:
            logger.remove(_stderr_sink[0])  # loguru's default stderr sink
        except ValueError:
            return False
        self._removed_default = True
        self._sink_id = logger.add(self._emit, level=0, format="{message}", catch=True)
        return True

    def uninstall(self) -> None:
        """Take this sink out and give loguru its stderr sink back."""
        from loguru import logger

        if self._sink_id is not None:
            logger.remove(self._sink_id)
            self._sink_id = None
        if self._removed_default:
            _stderr_sink[0] = logger.add(sys.stderr)
            self._removed_default = False

    @staticmethod
    def _emit(message: Any) -> None:
        record = message.record
        module = record["name"] or "ratchet"
        name = logger_name(module)
        extra = record["extra"]
        level = record["level"].no
        job_id = extra.get("job_id")
        text = record["message"]
        if job_id is not None:
            text = f"job {job_id}: {text}"
            if module.startswith("ratchet_core.worker"):
                level = logging.DEBUG
        target = logging.getLogger(name)
        if not target.isEnabledFor(level):
            return
        exception = record["exception"]
        exc_info = (exception.type, exception.value, exception.traceback) if exception else None
        fields = {k: extra[k] for k in ("job_id", "attempt", "target", "node_id") if k in extra}
        std = target.makeRecord(
            name,
            level,
            str(record["file"].path),
            record["line"],
            text,
            (),
            exc_info,
            record["function"],
            fields,
        )
        target.handle(std)


def _configure_logging(level: str) -> logging.handlers.QueueListener:
    from ratchet_core.observability.logs import start_queued_logging_keeping_handlers

    # Rendering (seconds per rich traceback) happens on a listener thread, never on the
    # heartbeat, completion or job threads that log. An application's own logging setup
    # (manage.py, flask) is kept; a bare process logs libraries (alembic, drivers) at WARNING
    # and Ratchet's own loggers at the chosen level.
    listener = start_queued_logging_keeping_handlers(_console_handler)
    logging.getLogger("ratchet").setLevel(level.upper())
    return listener


def _stderr() -> Any:
    from rich.console import Console

    return Console(stderr=True)


@click.command("worker")
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(min=1),
    help="Jobs of one execution type that run at once (worker.concurrency).",
)
@click.option(
    "--prefetch",
    type=click.IntRange(min=0),
    help="Claimed jobs that may wait for a slot (worker.prefetch; default: the concurrency).",
)
@click.option(
    "--targets",
    "--queues",
    "targets",
    metavar="LABEL[,LABEL...]",
    help="Only run jobs with these execution target labels, plus jobs without a label "
    "(worker.execution_targets).",
)
@click.option(
    "--burst",
    is_flag=True,
    help="Exit (code 0) once no due job is left instead of waiting for new work.",
)
@click.option(
    "--burst-timeout",
    type=click.FloatRange(min=0.1),
    default=3600.0,
    show_default=True,
    help="With --burst: give up (exit code 1) after this many seconds.",
)
@click.option(
    "--shutdown-timeout",
    type=click.FloatRange(min=0),
    help="Seconds running jobs get to finish on SIGTERM/SIGINT (worker.shutdown_timeout).",
)
@click.option(
    "--status/--no-status",
    default=None,
    help="Show the live status line (default: when stderr is a terminal).",
)
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
)
@click.pass_context
def worker_command(  # noqa: PLR0917 - click passes options positionally
    ctx: click.Context,
    concurrency: int | None,
    prefetch: int | None,
    targets: str | None,
    burst: bool,
    burst_timeout: float,
    shutdown_timeout: float | None,
    status: bool | None,
    log_level: str,
) -> None:
    """Run a worker: claim due jobs from the store and execute them.

    The worker stops gracefully on SIGTERM or SIGINT (Ctrl-C): it stops claiming, gives back
    claimed jobs that have not started, lets running jobs finish for up to the shutdown
    timeout, writes their outcomes and exits with code 0.

    \b
    Examples:
      ratchet --app containers:create_container worker -c 8
      ratchet --set store.url=postgresql+psycopg://localhost/app worker --targets gpu
      ratchet worker --burst          # run what is due, then exit
    """
    overrides: dict[str, str] = {}
    if concurrency is not None:
        overrides["worker.concurrency"] = str(concurrency)
    if prefetch is not None:
        overrides["worker.prefetch"] = str(prefetch)
    if targets is not None:
        overrides["worker.execution_targets"] = targets
    if shutdown_timeout is not None:
        overrides["worker.shutdown_timeout"] = str(shutdown_timeout)
    root = ctx.find_root()
    state = root.obj
    if overrides and state is not None and hasattr(state, "settings"):
        state.settings.update(overrides)

    signals = getattr(state, "worker_signals", None)
    own_signals = signals is None
    if signals is None:
        signals = WorkerSignals().install()
    try:
        listener = _configure_logging(log_level)
        bridge = LoguruToLogging() if getattr(state, "route_loguru", False) else None
        if bridge is not None:
            bridge.install()
        try:
            _run(ctx, burst, burst_timeout, status, signals)
        finally:
            from ratchet_core.observability.logs import stop_queued_logging

            if bridge is not None:
                bridge.uninstall()
            stop_queued_logging(listener)
    finally:
        if own_signals:
            signals.uninstall()


def limit_malloc_arenas(arenas: int) -> bool:
    """``mallopt(M_ARENA_MAX, arenas)`` when the C library is glibc and ``arenas`` > 0 (call it
    before the worker starts its threads); True when applied."""
    if arenas <= 0 or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        gnu_get_libc_version = libc.gnu_get_libc_version  # glibc only (not musl)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    del gnu_get_libc_version
    m_arena_max = -8  # <malloc.h>
    return bool(mallopt(m_arena_max, arenas) == 1)


_BURST_SLICE = 0.5
"""Seconds of one ``run_until_idle`` call of a burst: a signal is acted on between two."""


def _run_burst(worker: Any, timeout: float, signals: WorkerSignals) -> Any:
    """Run the started ``worker`` until no due job is left, ``timeout`` passed or a signal
    asked it to stop, then stop it; its final stats (``idle`` False unless it ran dry)."""
    deadline = time.monotonic() + timeout
    idle = False
    try:
        while not signals.stop_requested.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            # The worker runs already, so run_until_idle leaves it running when it returns;
            # jobs it put back that are due before the burst's own deadline are waited for.
            if worker.run_until_idle(min(left, _BURST_SLICE), due_within=left).idle:
                idle = True
                break
    finally:
        signals.stopping()
        stats = worker.stop()
    return attrs.evolve(stats, idle=idle)


def _run(
    ctx: click.Context,
    burst: bool,
    burst_timeout: float,
    status: bool | None,
    signals: WorkerSignals,
) -> None:
    from ratchet_core.cli import get_container
    from ratchet_core.runtime.stores import require_schema
    from ratchet_core.worker.settings import WORKER_MALLOC_ARENA_MAX

    state = ctx.find_root().obj
    container = get_container(ctx)
    upgrade_command = getattr(state, "upgrade_command", "ratchet db upgrade")
    try:
        limit_malloc_arenas(container.settings().get(WORKER_MALLOC_ARENA_MAX))
        require_schema(container.job_store(), upgrade_command=upgrade_command, remember=True)
        worker = container.worker()
    except RatchetError as exc:
        raise click.ClickException(str(exc)) from exc
    show_status = sys.stderr.isatty() if status is None else status
    started = time.monotonic()
    live: Any = None
    if show_status:
        from rich.live import Live

        live = Live(
            get_renderable=lambda: _status_line(worker, started),
            console=_stderr(),
            refresh_per_second=4,
            transient=False,
        )
        live.start()
    exit_code = 0
    try:
        with signals.starting_worker(worker):
            worker.start()
        if burst:
            stats = _run_burst(worker, burst_timeout, signals)
            if not stats.idle and not signals.stop_requested.is_set():
                exit_code = 1
                click.echo(f"--burst: work left after {burst_timeout:g}s", err=True)
        else:
            stats = worker.run_forever(install_signal_handlers=False)
    except RatchetError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        if live is not None:
            live.stop()
        _close(container)
    click.echo(f"worker {worker.node_id} stopped: {_summary(stats)}", err=True)
    if stats.abandoned:
        # Threads of abandoned jobs are still inside the job: exit without waiting for them
        # (an ExecutorProvider's pool may have non-daemon threads that the interpreter joins).
        click.echo(
            f"worker {worker.node_id}: {stats.abandoned} jobs were abandoned at shutdown "
            "(put back to pending); exiting with code 3",
            err=True,
        )
        _flush_logging()
        os._exit(ABANDONED_EXIT_CODE)
    ctx.exit(exit_code)


ABANDONED_EXIT_CODE = 3
"""Exit code of ``ratchet worker`` when jobs were still running after the shutdown timeout."""


def _flush_logging() -> None:
    from ratchet_core.observability.logs import flush_queued_logging

    flush_queued_logging()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _close(container: Any) -> None:
    for name in ("cluster_coordinator", "job_store"):
        try:
            getattr(container, name)().close()
        except Exception:
            logging.getLogger("ratchet.cli").debug("closing %s failed", name, exc_info=True)


def register(group: click.Group) -> None:
    group.add_command(worker_command)


__all__ = ["ABANDONED_EXIT_CODE", "LoguruToLogging", "WorkerSignals", "register", "worker_command"]
