"""The executor: calls one claimed job's target, ``def`` or ``async def``, with one call plan.

:meth:`JobExecutor.prepare` decodes the stored invocation and repeats the security checks
through the ``TargetLoader`` before anything runs. :meth:`JobExecutor.attempt_sync` and
:meth:`JobExecutor.attempt_async` then build the :class:`CallPlan` (the ``JobContext`` with a
lazily created logger, the arguments patched by the ``PreExecutionArgResolver`` and restored by
the loader, the bean instance of a method target), call the target (under the
``ResilienceStrategy`` when it is marked ``@circuit_breaker``), close the bean, and return the
:class:`Attempt`: what the call returned or raised. Both share every step but the call itself
(``plan.call()`` vs ``await plan.call_async()``). Nothing here touches threads or the store's
job rows: admission, the outcome decision and its hand-over are the runner's (``runner.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import attrs

from ratchet_api.errors import TargetNotImportableError
from ratchet_api.model import JobLoggerContext
from ratchet_api.spi import (
    BeanResolver,
    ErrorSanitizer,
    JobAuthorizationPolicy,
    JobLogger,
    JobLoggerFactory,
    PayloadSerializer,
    PreExecutionArgResolver,
    ResilienceStrategy,
    TargetLoader,
)
from ratchet_api.spi.runtime import ManagedBean
from ratchet_api.store.protocols import JobExtensionStore
from ratchet_core.defaults.authorization import authorization_request
from ratchet_core.defaults.execution import NoOpPreExecutionArgResolver
from ratchet_core.enqueue.invocation import check_stored_target
from ratchet_core.observability.tracing import Tracing
from ratchet_core.payload.codec import PayloadCodec
from ratchet_core.worker.context import RunningJobContext
from ratchet_core.worker.execution import ASYNC_GATE, SYNC_GATE, ClaimedJob, GateKey
from ratchet_core.worker.outcome import REFUSED
from ratchet_core.worker.tracebacks import safe_sanitize

_log = logging.getLogger("ratchet.worker")


JOB_ERRORS = (Exception, SystemExit, KeyboardInterrupt, asyncio.CancelledError)
"""What a job may raise and still get an outcome: ``sys.exit()`` in job code and a
``CancelledError`` escaping a coroutine are failed attempts, never a job left RUNNING with its
slot taken. (``GeneratorExit`` is left alone: it closes an abandoned coroutine.)"""


class LazyJobLogger:
    """Creates the job logger on first use, so jobs that never log pay nothing."""

    __slots__ = ("_context", "_factory", "logger")

    def __init__(self, factory: JobLoggerFactory, context: JobLoggerContext) -> None:
        self._factory = factory
        self._context = context
        self.logger: JobLogger | None = None

    def get(self) -> JobLogger:
        if self.logger is None:
            self.logger = self._factory.create(self._context)
        return self.logger

    def finish(self) -> None:
        logger = self.logger
        if logger is None:
            return
        for name in ("flush", "close"):
            method = getattr(logger, name, None)
            if callable(method):
                try:
                    method()
                except Exception:  # noqa: BLE001 - logging never fails a job
                    _log.debug("job logger %s() failed", name, exc_info=True)


class _Context(RunningJobContext):
    """``RunningJobContext`` whose logger is created lazily."""

    __slots__ = ("_lazy",)

    def __init__(self, lazy: LazyJobLogger, **kwargs: Any) -> None:
        super().__init__(logger=None, **kwargs)  # type: ignore[arg-type]
        self._lazy = lazy

    @property
    def logger(self) -> JobLogger:
        return self._lazy.get()


@attrs.define(slots=True)
class CallPlan:
    """One call of a job target: function, arguments, bean handle, breaker."""

    function: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    bean: ManagedBean | None
    breaker: Any
    resilience: ResilienceStrategy

    def call(self) -> Any:
        """Call a ``def`` target; the bean is closed afterwards whatever happens."""
        try:
            if self.breaker is None:
                return self.function(*self.args, **self.kwargs)
            service, exception_filter = self.breaker
            return self.resilience.execute(
                service, lambda: self.function(*self.args, **self.kwargs), exception_filter
            )
        finally:
            self.close()

    async def call_async(self) -> Any:
        """Await an ``async def`` target; the bean is closed afterwards whatever happens."""
        try:
            if self.breaker is None:
                return await self.function(*self.args, **self.kwargs)
            service, exception_filter = self.breaker
            return await self.resilience.execute_async(
                service, lambda: self.function(*self.args, **self.kwargs), exception_filter
            )
        finally:
            self.close()

    def close(self) -> None:
        bean, self.bean = self.bean, None
        if bean is not None:
            bean.close()


@attrs.define(slots=True)
class Attempt:
    """How one call ended: ``error`` None means success with ``result``. ``logger`` is the
    attempt's job logger when the job asked for a context (finish it after use)."""

    job: ClaimedJob
    result: Any = None
    error: BaseException | None = None
    logger: LazyJobLogger | None = None


class JobExecutor:
    """Prepares and runs claimed jobs (see the module docstring). Thread safe: it keeps no
    per-job state of its own."""

    def __init__(
        self,
        *,
        loader: TargetLoader,
        arg_resolver: PreExecutionArgResolver,
        bean_resolver: BeanResolver,
        resilience: ResilienceStrategy,
        logger_factory: JobLoggerFactory,
        serializer: PayloadSerializer,
        sanitizer: ErrorSanitizer,
        extension: JobExtensionStore | None,
        node_id: str,
        codec: PayloadCodec | None = None,
        authorization: JobAuthorizationPolicy | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self._loader = loader
        self._arg_resolver = arg_resolver
        self._beans = bean_resolver
        self._resilience = resilience
        self._logger_factory = logger_factory
        self._serializer = serializer
        self._sanitizer = sanitizer
        self._extension = extension
        self._node_id = node_id
        self._codec = codec if codec is not None else PayloadCodec.disabled()
        self._authorization = authorization
        self._tracing = tracing if tracing is not None else Tracing()

    def prepare(self, job: ClaimedJob) -> str | TargetNotImportableError | None:
        """Decode and re-check the job: None when it may run (``job.invocation``,
        ``job.loaded`` and ``job.gate`` are set), a ``TargetNotImportableError`` when its target
        cannot be imported here (a failed attempt, retried), else the reason it must never run
        (dead letter)."""
        entity = job.entity
        if entity.attempt > entity.max_retries + 1:
            return (
                f"WorkerLost: attempt {entity.attempt} exceeds max_retries {entity.max_retries} "
                "after the previous attempt's worker stopped; not run again"
            )
        try:
            invocation = self._codec.open_invocation(entity)  # decrypted when sealed
            check_stored_target(entity.target, invocation)  # a rewritten payload never runs
            if self._authorization is not None:
                self._authorization.check_execute(
                    authorization_request(entity, invocation, self._extension)
                )
            loaded = self._loader.load(invocation)
        except TargetNotImportableError as exc:
            return exc
        except REFUSED as exc:
            return f"refused at dispatch: {safe_sanitize(self._sanitizer, exc)}"
        except Exception as exc:  # noqa: BLE001 - an unexpected loader error is a refusal too
            return f"cannot load the job target: {safe_sanitize(self._sanitizer, exc)}"
        job.invocation = invocation
        job.loaded = loaded
        label = entity.execution_target
        if label:
            job.gate = GateKey.of_label(label)
        else:
            job.gate = ASYNC_GATE if loaded.is_async else SYNC_GATE
        return None

    def attempt_sync(self, job: ClaimedJob) -> Attempt:
        """Call a prepared ``def`` job on this thread."""
        attempt = Attempt(job)
        try:
            plan = self._plan(attempt)
            job.called = True
            attempt.result = plan.call()
        except JOB_ERRORS as exc:  # every job error goes through the retry path
            attempt.error = exc
        return attempt

    async def attempt_async(self, job: ClaimedJob) -> Attempt:
        """Await a prepared ``async def`` job on the running loop."""
        attempt = Attempt(job)
        try:
            if self._plan_may_block(job):
                # late-bound arguments are read from the store: never on the event loop,
                # where the wait would stall every other async job of this worker
                plan = await asyncio.to_thread(self._plan, attempt)
            else:
                plan = self._plan(attempt)
            job.called = True
            attempt.result = await plan.call_async()
        except JOB_ERRORS as exc:  # every job error goes through the retry path
            attempt.error = exc
        return attempt

    def _plan_may_block(self, job: ClaimedJob) -> bool:
        """Whether building ``job``'s call plan may wait on the store. A resolver with a
        ``needs_store(invocation)`` method (the default ``WorkflowArgResolver``: late-bound
        workflow arguments) says so itself; the no-op resolver never does; any other one may
        read anything, so it is assumed to."""
        resolver = self._arg_resolver
        if isinstance(resolver, NoOpPreExecutionArgResolver):
            return False
        needs_store = getattr(resolver, "needs_store", None)
        if callable(needs_store):
            assert job.invocation is not None
            return bool(needs_store(job.invocation))
        return True

    def _plan(self, outcome: Attempt) -> CallPlan:
        job = outcome.job
        entity = job.entity
        loaded = job.loaded
        context = None
        if loaded.context_parameters:
            outcome.logger = LazyJobLogger(
                self._logger_factory,
                JobLoggerContext(
                    job_id=entity.id,
                    target=entity.target,
                    attempt=entity.attempt,
                    node_id=self._node_id,
                    job_type=entity.job_type,
                ),
            )
            context = _Context(
                outcome.logger,
                job_id=entity.id,
                attempt=entity.attempt,
                claim_seq=entity.claim_seq,
                extension_store=self._codec.state_store(entity, self._extension),
                serializer=self._serializer,
                signal_payload=self._codec.open_signal_payload(entity),  # opened when sealed
            )
        invocation = job.invocation
        assert invocation is not None
        patched = self._arg_resolver.resolve_arguments(entity.id, invocation)
        if patched is not None and patched is not invocation:
            # Only the arguments of the hook's answer are honoured: the target stays the one
            # that passed the security checks.
            invocation = attrs.evolve(invocation, args=patched.args, kwargs=patched.kwargs)
        args, kwargs = self._loader.bind_arguments(loaded, invocation, context)
        bean = None
        if loaded.owner_class is not None:
            bean = self._beans.acquire(loaded.owner_class)
            args = (bean.instance, *args)
        return CallPlan(
            function=self._tracing.wrap(entity, loaded.function),  # the execution span
            args=args,
            kwargs=kwargs,
            bean=bean,
            breaker=loaded.circuit_breaker,
            resilience=self._resilience,
        )


__all__ = ["JOB_ERRORS", "REFUSED", "Attempt", "CallPlan", "JobExecutor", "LazyJobLogger"]
