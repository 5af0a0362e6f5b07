"""Job targets: turning a callable into a ``JobInvocation`` at enqueue, and back into something
the worker can call at dispatch.

A target is a public, importable function: a module-level function (sync or ``async def``), a
static or class method, or a method of a class the container provides (``SomeService.method``,
the unbound function: the worker gets an instance from the ``BeanResolver``). Everything the
worker could not import again by name is refused at enqueue with ``InvalidTargetError``: lambdas,
closures and nested functions, bound methods of objects, ``functools.partial``, builtins, targets
defined in ``__main__``, private (``_``-prefixed) names. The target itself (``module.qualname``),
its owner class and every user class named by its parameter hints or by the argument values pass
the ``ClassPolicy``; the same checks run again at dispatch (:meth:`load`), together with a
comparison of the parameter list recorded at enqueue.

A parameter annotated ``JobContext`` is never stored: the worker injects the running job's context.
A parameter annotated with a late-bound marker (``ParentResult[T]``, ``ParentError``,
``SignalPayload[T]`` from :mod:`ratchet_api.workflow`) is not passed at enqueue either: a
placeholder is stored in its place, which the ``PreExecutionArgResolver`` replaces at dispatch.
"""

from __future__ import annotations

import inspect
import threading
import typing
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ratchet_api.errors import (
    ClassNotAllowedError,
    InvalidJobError,
    PayloadError,
)
from ratchet_api.model import JobInvocation
from ratchet_api.scheduler import JobContext
from ratchet_api.spi.payload import PayloadSerializer
from ratchet_api.spi.policies import ClassPolicy
from ratchet_api.spi.runtime import BeanResolver
from ratchet_core.enqueue.targets import (
    CIRCUIT_BREAKER_ATTRIBUTE,
    DESCRIBED_MAX,
    PLACEHOLDER_KEY,
    LoadedTarget,
    NameChain,
    TargetInfo,
    annotation_text,
    check_defined_where_named,
    check_stored_target,
    circuit_breaker,
    import_module,
    is_context,
    is_scalar_of,
    late_binding,
    locate_function,
    not_importable,
    placeholder,
    refuse,
    scalar_types,
    signature_text,
)
from ratchet_core.payload.serialization import type_name, value_classes


class DefaultJobInvocationResolver:
    """The default ``JobInvocationResolver`` (see the module docstring). Thread safe; what it
    learns about a target (hints, parameters) is cached, the ``ClassPolicy`` is asked every
    time."""

    def __init__(
        self,
        serializer: PayloadSerializer,
        class_policy: ClassPolicy,
        bean_resolver: BeanResolver | None = None,
    ) -> None:
        self._serializer = serializer
        self._policy = class_policy
        self._beans = bean_resolver
        self._loaded: dict[tuple[str, str, bool], TargetInfo] = {}
        self._targets: dict[int, tuple[TargetInfo, LoadedTarget]] = {}  # by id() of the info
        self._inspected: dict[tuple[str, str], tuple[Any, TargetInfo]] = {}
        self._described: dict[Any, tuple[NameChain, TargetInfo]] = {}  # see ``describe``
        self._lock = threading.Lock()

    # ------------------------------------------------------------ enqueue side

    def describe(self, target: Callable[..., Any]) -> TargetInfo:
        """Locate and vet ``target`` without arguments (the ``LambdaAnalyzer`` view). A target
        object vetted before is described at once while its name still leads to the same
        objects (``NameChain``); a re-defined, replaced or reloaded one is vetted again."""
        try:
            hit = self._described.get(target)
        except TypeError:  # an unhashable callable: vetted (and refused) below
            hit = None
        if hit is not None and hit[0].holds():
            return hit[1]
        module, qualname, function, name = locate_function(target)
        info = self._inspect(module, qualname, expected=function, name=name)
        chain = NameChain.of(module, qualname)
        if chain is not None:
            if len(self._described) >= DESCRIBED_MAX:
                self._described.clear()
            self._described[target] = (chain, info)
        return info

    def _import(self, module: str, qualname: str, name: str) -> tuple[Any, Any]:
        """(owner or module, attribute) by name; ``TargetNotImportableError`` if it cannot be
        found (a missing module, a module that fails to import, a missing attribute)."""
        try:
            holder: Any = import_module(module)
        except Exception as exc:  # any import failure makes the target unusable here
            raise not_importable(name, f"module {module} cannot be imported ({exc!r})") from exc
        parts = qualname.split(".")
        for part in parts[:-1]:
            holder = getattr(holder, part, None)
            if not inspect.isclass(holder):
                raise not_importable(
                    name, f"{module}.{qualname} cannot be found by importing {module}"
                )
        try:
            static_attr = inspect.getattr_static(holder, parts[-1])
        except AttributeError:
            raise not_importable(
                name, f"{module} has no attribute {qualname}: the worker cannot import it"
            ) from None
        return holder, static_attr

    def _inspect(
        self, module: str, qualname: str, *, expected: Callable[..., Any] | None, name: str
    ) -> TargetInfo:
        holder, attr = self._import(module, qualname, name)
        with self._lock:
            cached = self._inspected.get((module, qualname))
        if cached is not None and cached[0] is attr:
            info = cached[1]
            if expected is not None and info.function is not expected:
                raise refuse(
                    name,
                    f"importing {module}.{qualname} gives a different object (was the function "
                    "replaced or re-defined after import?)",
                )
            return info
        info = self._analyse(module, qualname, holder, attr, expected=expected, name=name)
        with self._lock:
            self._inspected[(module, qualname)] = (attr, info)
        return info

    def _analyse(
        self,
        module: str,
        qualname: str,
        holder: Any,
        attr: Any,
        *,
        expected: Callable[..., Any] | None,
        name: str,
    ) -> TargetInfo:
        owner = holder if inspect.isclass(holder) else None
        if isinstance(attr, staticmethod):
            function, call, static = attr.__func__, attr.__func__, True
        elif isinstance(attr, classmethod):
            function, static = attr.__func__, True
            call = getattr(holder, qualname.rsplit(".", 1)[-1])
        elif inspect.isfunction(attr):
            function, call, static = attr, attr, owner is None
        else:
            raise refuse(name, f"{module}.{qualname} is a {type(attr).__name__}, not a function")
        if expected is not None and function is not expected:
            raise refuse(
                name,
                f"importing {module}.{qualname} gives a different object (was the function "
                "replaced or re-defined after import?)",
            )
        check_defined_where_named(module, qualname, owner, function, name)
        if function.__name__ == "<lambda>":
            raise refuse(name, "lambdas cannot be stored; define a module-level function")
        try:
            hints = typing.get_type_hints(function)
        except Exception as exc:  # unresolvable hints cannot be restored
            raise refuse(name, f"its type hints cannot be resolved ({exc!r})") from exc
        hints.pop("return", None)
        try:
            params = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError) as exc:
            raise refuse(name, f"its signature cannot be read ({exc})") from exc
        if not static or isinstance(attr, classmethod):
            if not params or params[0].kind not in (
                inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
            ):
                raise refuse(name, "a method must take the instance (or class) first")
            params = params[1:]
        context = frozenset(p.name for p in params if is_context(hints.get(p.name)))
        try:
            extras = typing.get_type_hints(function, include_extras=True)
        except Exception:  # noqa: BLE001 - resolved once above; no markers then
            extras = {}
        late = {
            p.name: kind for p in params if (kind := late_binding(extras.get(p.name))) is not None
        }
        return TargetInfo(
            module=module,
            qualname=qualname,
            static=static,
            owner=owner,
            call=call,
            function=function,
            parameters=tuple(params),
            hints=hints,
            context_parameters=context,
            signature=signature_text(params),
            late_parameters=late,
        )

    def _check_names(self, module: str, qualname: str) -> None:
        """The ``ClassPolicy`` checks that need only names: the target and its owner class."""
        dotted = f"{module}.{qualname}"
        where = f"job target {module}:{qualname}"
        if not self._policy.is_allowed(dotted):
            raise ClassNotAllowedError(dotted, where)
        if "." in qualname:
            owner = f"{module}.{qualname.rsplit('.', 1)[0]}"
            if not self._policy.is_allowed(owner):
                raise ClassNotAllowedError(owner, f"owner class of {where}")

    def _check_policy(self, info: TargetInfo) -> None:
        where = f"job target {info.target}"
        if not self._policy.is_allowed(info.dotted):
            raise ClassNotAllowedError(info.dotted, where)
        if info.owner is not None:
            owner_name = type_name(info.owner)
            if not self._policy.is_allowed(owner_name):
                raise ClassNotAllowedError(owner_name, f"owner class of {where}")
        for param, hint in info.hints.items():
            if param in info.context_parameters:
                continue
            try:
                classes = self._serializer.classes_in(hint)
            except PayloadError as exc:
                raise refuse(info.target, f"parameter {param!r}: {exc}") from exc
            for class_name in classes:
                if not self._policy.is_allowed(class_name):
                    raise ClassNotAllowedError(
                        class_name, f"type of parameter {param!r} of {where}"
                    )

    def resolve(
        self,
        target: Callable[..., Any],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> JobInvocation:
        info = self._prepare(target)
        return self._build(info, args, dict(kwargs or {}))

    def resolve_many(
        self, target: Callable[..., Any], arg_tuples: Sequence[Sequence[Any]]
    ) -> list[JobInvocation]:
        """``resolve`` for many argument tuples of one target (the target is vetted once).
        Errors name the index of the failing tuple."""
        info = self._prepare(target)
        out: list[JobInvocation] = []
        build = self._build if info.late_parameters else self._build_positional
        for index, args in enumerate(arg_tuples):
            try:
                out.append(build(info, args, {}))
            except (InvalidJobError, PayloadError) as exc:
                raise type(exc)(f"item {index}: {exc}") from exc
        return out

    def _build_positional(
        self, info: TargetInfo, args: Sequence[Any], _kwargs: dict[str, Any]
    ) -> JobInvocation:
        """:meth:`_build` for positional arguments only and a target without late-bound
        parameters (what ``resolve_many`` builds): the same checks, without the work that
        keywords and placeholders need."""
        count = len(args)
        if count not in info.bound_arities:
            self._bind(info, args, {})
        json_args: tuple[Any, ...] = ()
        if count:
            names = info.positional_names(count)
            for param_name, value in zip(names, args, strict=False):
                for class_name in value_classes(value):
                    if not self._policy.is_allowed(class_name):
                        raise ClassNotAllowedError(
                            class_name, f"argument {param_name!r} of job target {info.target}"
                        )
            json_args = tuple(
                self._convert(info, name, value) for name, value in zip(names, args, strict=False)
            )
            hints = info.checked_hints
            if hints:
                for name, raw in zip(names, json_args, strict=False):
                    hint = hints.get("*" if name.startswith("*") else name)
                    if hint is not None:
                        self._check_restorable(info, name, raw, hint)
        return JobInvocation(
            module=info.module,
            qualname=info.qualname,
            static=info.static,
            signature=info.signature,
            args=json_args,
            kwargs={},
        )

    def _prepare(self, target: Callable[..., Any]) -> TargetInfo:
        info = self.describe(target)
        self._check_policy(info)
        if not info.static:
            self._validate_owner(info)
        return info

    def _build(
        self, info: TargetInfo, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> JobInvocation:
        for context_name in info.context_parameters:
            if context_name in kwargs:
                raise InvalidJobError(
                    f"cannot enqueue {info.target}: parameter {context_name!r} is the JobContext "
                    "the worker supplies; do not pass it"
                )
        for late_name, kind in info.late_parameters.items():
            if late_name in kwargs:
                raise InvalidJobError(
                    f"cannot enqueue {info.target}: parameter {late_name!r} ({kind}) is supplied "
                    "by the worker; do not pass it"
                )
            kwargs[late_name] = placeholder(kind)
        values: Sequence[tuple[str, Any]]
        if not kwargs and len(args) in info.bound_arities:
            values = list(zip(info.positional_names(len(args)), args, strict=False))
        else:
            values = self._bind(info, args, kwargs)
        for param_name, value in values:
            for class_name in value_classes(value):
                if not self._policy.is_allowed(class_name):
                    raise ClassNotAllowedError(
                        class_name, f"argument {param_name!r} of job target {info.target}"
                    )
        names = info.positional_names(len(args))
        json_args = tuple(self._convert(info, names[i], value) for i, value in enumerate(args))
        json_kwargs = {key: self._convert(info, key, value) for key, value in kwargs.items()}
        hints = info.checked_hints
        if hints:
            for name, raw in zip(names, json_args, strict=False):
                hint = hints.get("*" if name.startswith("*") else name)
                if hint is not None:
                    self._check_restorable(info, name, raw, hint)
            for key, raw in json_kwargs.items():
                if key in info.late_parameters:
                    continue
                hint = hints.get(key) if key in info.named_parameters else hints.get("**")
                if hint is not None:
                    self._check_restorable(info, key, raw, hint)
        return JobInvocation(
            module=info.module,
            qualname=info.qualname,
            static=info.static,
            signature=info.signature,
            args=json_args,
            kwargs=json_kwargs,
        )

    @staticmethod
    def _bind(
        info: TargetInfo, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> list[tuple[str, Any]]:
        """The arguments by parameter name; ``InvalidJobError`` when they do not fit."""
        try:
            bound = info.binding_signature.bind(*args, **kwargs)
        except TypeError as exc:
            late_hint = (
                f" (parameters {', '.join(info.late_parameters)} are supplied by the worker: pass "
                "the others by keyword if they come after)"
                if info.late_parameters
                else ""
            )
            raise InvalidJobError(
                f"cannot enqueue {info.target}{info.signature}: {exc}{late_hint}"
            ) from None
        if not kwargs:
            info.bound_arities.add(len(args))
        return list(bound.arguments.items())

    def _convert(self, info: TargetInfo, param: str, value: Any) -> Any:
        try:
            return self._serializer.to_json_value(value)
        except PayloadError as exc:
            raise PayloadError(f"argument {param!r} of job target {info.target}: {exc}") from exc

    def _check_restorable(self, info: TargetInfo, param: str, raw: Any, hint: Any) -> None:
        """Restore ``raw`` as the worker will: a value that does not fit the declared type is
        refused now rather than failing every attempt in a worker."""
        try:
            self._serializer.from_json_value(raw, hint)
        except ClassNotAllowedError:
            raise
        except (PayloadError, ValueError, TypeError) as exc:
            raise InvalidJobError(
                f"cannot enqueue {info.target}: argument {param!r} does not fit its declared "
                f"type {annotation_text(hint)}: {exc}"
            ) from exc
        # JSON scalars are handed to the target as they are (nothing to restore), so the
        # serializer accepts any of them: check their JSON type against a scalar hint here.
        expected = scalar_types(hint)
        if expected is not None and not is_scalar_of(raw, expected):
            raise InvalidJobError(
                f"cannot enqueue {info.target}: argument {param!r} does not fit its declared "
                f"type {annotation_text(hint)}: got {type(raw).__name__} {raw!r}"
            )

    def _validate_owner(self, info: TargetInfo) -> None:
        assert info.owner is not None
        if self._beans is None:
            raise refuse(
                info.target,
                f"it is a method of {type_name(info.owner)} and no BeanResolver is configured "
                "to provide instances",
            )
        try:
            self._beans.validate_resolvable(info.owner)
        except LookupError as exc:
            raise refuse(
                info.target,
                f"the container cannot provide an instance of {type_name(info.owner)} ({exc})",
            ) from exc

    # ------------------------------------------------------------ dispatch side

    def load(self, invocation: JobInvocation) -> LoadedTarget:
        """Locate the stored target again and repeat the security checks: importable, public,
        not a lambda or nested function, allowed by the ``ClassPolicy`` (target, owner class,
        classes of the hints), static flag and parameter list as recorded at enqueue. Raises
        ``TargetNotImportableError`` when the target cannot be imported here (the worker retries
        it), other ``InvalidTargetError``s or ``ClassNotAllowedError`` for refusals.

        An invocation without a recorded signature is refused: every invocation Ratchet stores
        has one (:meth:`sign` adds it to one submitted by name), so a payload without it was
        written by someone else."""
        name = invocation.target
        info = self._locate(invocation)
        if not invocation.signature:
            raise refuse(
                name,
                "the stored invocation has no recorded signature (every job Ratchet enqueues "
                "records one; a payload without it was written by something else)",
            )
        if info.signature != invocation.signature:
            raise refuse(
                name,
                f"its parameters changed since the job was enqueued: stored "
                f"{invocation.signature}, now {info.signature}",
            )
        marker = getattr(info.function, CIRCUIT_BREAKER_ATTRIBUTE, None)
        cached = self._targets.get(id(info))  # the same checked info: the same target
        if cached is not None and cached[0] is info and cached[1].circuit_breaker is marker:
            return cached[1]
        loaded = LoadedTarget(
            function=info.call,
            owner_class=None if info.static else info.owner,
            is_async=inspect.iscoroutinefunction(info.function),
            circuit_breaker=marker,
            target=info.target,
            parameters=info.parameters,
            hints=info.hints,
            context_parameters=info.context_parameters,
        )
        self._targets[id(info)] = (info, loaded)
        return loaded

    def sign(self, invocation: JobInvocation) -> JobInvocation:
        """``invocation`` with the target's current signature recorded when it has none (an
        invocation submitted by name through ``enqueue_invocation``), after the same checks as
        :meth:`load`; unchanged when it has one."""
        if invocation.signature:
            return invocation
        info = self._locate(invocation)
        return attrs.evolve(invocation, signature=info.signature)

    def _locate(self, invocation: JobInvocation) -> TargetInfo:
        """The stored target, found by name and checked (everything :meth:`load` checks but the
        signature)."""
        name = invocation.target
        key = (invocation.module, invocation.qualname, invocation.static)
        with self._lock:
            info = self._loaded.get(key)
        if info is None:
            qualname = invocation.qualname
            if "<lambda>" in qualname or "<locals>" in qualname:
                raise refuse(name, "lambdas, closures and nested functions cannot run")
            if invocation.module == "__main__":
                raise refuse(name, "targets in __main__ cannot run in a worker")
            if any(part.startswith("_") for part in qualname.split(".")):
                raise refuse(name, "private targets cannot run")
            # Judged by name before anything is imported: a module outside the allowlist must
            # not run its import-time code in a worker because a row names it.
            self._check_names(invocation.module, qualname)
            info = self._inspect(invocation.module, qualname, expected=None, name=name)
            with self._lock:
                self._loaded[key] = info
        if info.static != invocation.static:
            kind = "static" if invocation.static else "a method of a container-provided class"
            raise refuse(name, f"it was stored as {kind}, but the code no longer matches")
        self._check_policy(info)
        return info

    def bind_arguments(
        self,
        loaded: LoadedTarget,
        invocation: JobInvocation,
        context: JobContext | None,
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call arguments: each stored JSON value restored from its parameter's type hint
        (``PayloadError`` naming the argument), ``context`` injected into ``JobContext``
        parameters. For a non-static target the instance is not included."""
        if not loaded.parameters and not invocation.args and not invocation.kwargs:
            return (), {}  # a target without parameters: nothing to bind
        binding_params = [p for p in loaded.parameters if p.name not in loaded.context_parameters]
        try:
            bound = inspect.Signature(binding_params).bind(
                *invocation.args, **dict(invocation.kwargs)
            )
        except TypeError as exc:
            raise PayloadError(
                f"stored arguments of job target {loaded.target} no longer fit its parameters: "
                f"{exc}"
            ) from None
        values: dict[str, Any] = {}
        for param in binding_params:
            if param.name not in bound.arguments:
                continue
            raw = bound.arguments[param.name]
            hint = loaded.hints.get(param.name, Any)
            if param.kind is param.VAR_POSITIONAL:
                values[param.name] = tuple(
                    self._restore(loaded, f"*{param.name}[{i}]", item, hint)
                    for i, item in enumerate(raw)
                )
            elif param.kind is param.VAR_KEYWORD:
                values[param.name] = {
                    k: self._restore(loaded, f"{param.name}[{k!r}]", v, hint)
                    for k, v in raw.items()
                }
            else:
                values[param.name] = self._restore(loaded, param.name, raw, hint)
        for context_name in loaded.context_parameters:
            values[context_name] = context
        call_args: list[Any] = []
        call_kwargs: dict[str, Any] = {}
        positional_open = True  # false after a skipped (defaulted) positional parameter
        for param in loaded.parameters:
            present = param.name in values
            if param.kind is param.VAR_POSITIONAL:
                if present:
                    call_args.extend(values[param.name])
                continue
            if param.kind is param.VAR_KEYWORD:
                if present:
                    call_kwargs.update(values[param.name])
                continue
            if not present:
                if param.kind is not param.KEYWORD_ONLY:
                    positional_open = False
                continue
            if param.kind is param.KEYWORD_ONLY or not positional_open:
                call_kwargs[param.name] = values[param.name]
            else:
                call_args.append(values[param.name])
        return tuple(call_args), call_kwargs

    def _restore(self, loaded: LoadedTarget, param: str, raw: Any, hint: Any) -> Any:
        try:
            return self._serializer.from_json_value(raw, hint)
        except ClassNotAllowedError:
            raise
        except (PayloadError, ValueError, TypeError) as exc:
            raise PayloadError(f"argument {param!r} of job target {loaded.target}: {exc}") from exc


def sign_invocation(loader: object, invocation: JobInvocation) -> JobInvocation:
    """``invocation`` with its target's signature recorded (:meth:`DefaultJobInvocationResolver.
    sign`) when ``loader`` can record it; unchanged otherwise. The enqueue-by-name paths call
    it so that what they store passes the dispatch check of a recorded signature."""
    if invocation.signature or not isinstance(loader, DefaultJobInvocationResolver):
        return invocation
    return loader.sign(invocation)


__all__ = [
    "PLACEHOLDER_KEY",
    "CIRCUIT_BREAKER_ATTRIBUTE",
    "DefaultJobInvocationResolver",
    "LoadedTarget",
    "check_stored_target",
    "circuit_breaker",
    "sign_invocation",
    "signature_text",
]
