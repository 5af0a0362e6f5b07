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

import functools
import importlib
import inspect
import threading
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from ratchet_api.errors import (
    ClassNotAllowedError,
    InvalidJobError,
    InvalidTargetError,
    PayloadError,
    TargetNotImportableError,
)
from ratchet_api.model import CircuitBreakerExceptionFilter, JobInvocation, LambdaDescriptor
from ratchet_api.scheduler import JobContext
from ratchet_api.spi.payload import JobInvocationResolver, PayloadSerializer, TargetLoader
from ratchet_api.spi.policies import ClassPolicy
from ratchet_api.spi.runtime import BeanResolver
from ratchet_api.workflow import LateBound
from ratchet_core.serialization import type_name, value_classes

F = TypeVar("F", bound=Callable[..., Any])

CIRCUIT_BREAKER_ATTRIBUTE = "__ratchet_circuit_breaker__"


@attrs.frozen(kw_only=True)
class LoadedTarget:
    """A target located and re-checked at dispatch.

    ``owner_class`` is set for non-static targets: the worker acquires an instance with
    ``bean_resolver.acquire(owner_class)`` and calls ``function(instance, *args, **kwargs)``.
    ``circuit_breaker`` is ``(service, filter)`` from ``@circuit_breaker``, or None.
    """

    function: Callable[..., Any]
    owner_class: type | None
    is_async: bool
    circuit_breaker: tuple[str, CircuitBreakerExceptionFilter | None] | None = None
    target: str = ""
    parameters: tuple[inspect.Parameter, ...] = ()
    hints: Mapping[str, Any] = attrs.field(factory=dict)
    context_parameters: frozenset[str] = frozenset()


def circuit_breaker(
    service: str,
    *,
    record: Sequence[type[BaseException]] = (),
    ignore: Sequence[type[BaseException]] = (),
    predicate: Callable[[BaseException], bool] | None = None,
) -> Callable[[F], F]:
    """Run the decorated job target under the circuit breaker named ``service``.

    ``record``/``ignore``/``predicate`` decide which failures count against the breaker (merged
    with the configured filter). The function is returned unchanged apart from a marker
    attribute, so it stays importable by name::

        @circuit_breaker(service="payments", ignore=(ValueError,))
        def charge(order_id: int) -> None: ...
    """
    if not isinstance(service, str) or not service.strip():
        raise ValueError("circuit_breaker: service must be a non-empty string")
    exception_filter: CircuitBreakerExceptionFilter | None = None
    if record or ignore or predicate is not None:
        exception_filter = CircuitBreakerExceptionFilter(
            record=tuple(record), ignore=tuple(ignore), predicate=predicate
        )

    def decorate(fn: F) -> F:
        target = fn.__func__ if isinstance(fn, (staticmethod, classmethod)) else fn
        setattr(target, CIRCUIT_BREAKER_ATTRIBUTE, (service, exception_filter))
        return fn

    return decorate


@attrs.frozen(kw_only=True, cache_hash=False)
class _TargetInfo:
    module: str
    qualname: str
    static: bool
    owner: type | None  # the class holding the target (also for static/class methods)
    call: Callable[..., Any]  # what the worker calls (bound classmethod, function)
    function: Callable[..., Any]  # the underlying function (for hints, markers)
    parameters: tuple[inspect.Parameter, ...]
    hints: Mapping[str, Any]
    context_parameters: frozenset[str]
    signature: str
    late_parameters: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def target(self) -> str:
        return f"{self.module}:{self.qualname}"

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.qualname}"

    @functools.cached_property
    def binding_parameters(self) -> list[inspect.Parameter]:
        return [p for p in self.parameters if p.name not in self.context_parameters]

    @functools.cached_property
    def binding_signature(self) -> inspect.Signature:
        return inspect.Signature(self.binding_parameters)

    def positional_names(self, count: int) -> list[str]:
        names = self._names_by_count.get(count)
        if names is None:
            names = self._names_by_count[count] = _positional_names(self.binding_parameters, count)
        return names

    @functools.cached_property
    def _names_by_count(self) -> dict[int, list[str]]:
        return {}

    @functools.cached_property
    def bound_arities(self) -> set[int]:
        """Counts of positional arguments (without keywords) that bound to the signature:
        whether ``n`` positional arguments bind depends only on ``n``, so a bulk enqueue binds
        each count once instead of once per job."""
        return set()

    @functools.cached_property
    def checked_hints(self) -> dict[str, Any]:
        """Declared types that enqueue checks argument values against, by parameter name
        (``"*"``/``"**"`` for the items of ``*args``/``**kwargs``); unhinted and ``Any``
        parameters are not checked."""
        hints: dict[str, Any] = {}
        for param in self.binding_parameters:
            hint = self.hints.get(param.name, Any)
            if hint is Any:
                continue
            if param.kind is param.VAR_POSITIONAL:
                hints["*"] = hint
            elif param.kind is param.VAR_KEYWORD:
                hints["**"] = hint
            else:
                hints[param.name] = hint
        return hints

    @functools.cached_property
    def named_parameters(self) -> frozenset[str]:
        kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        return frozenset(p.name for p in self.binding_parameters if p.kind not in kinds)


def _refuse(target: str, why: str) -> InvalidTargetError:
    return InvalidTargetError(f"job target {target} is refused: {why}")


def _not_importable(target: str, why: str) -> TargetNotImportableError:
    return TargetNotImportableError(f"job target {target} is refused: {why}")


def _import_module(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError:
        # The finders cache directory listings: a module deployed since the last attempt is
        # found only once the caches are dropped.
        importlib.invalidate_caches()
        return importlib.import_module(module)


def _check_defined_where_named(
    module: str, qualname: str, owner: type | None, function: Callable[..., Any], name: str
) -> None:
    """Refuse a target reached by a path other than the one it is defined at.

    The allowlist judges names, so the name must be where the code lives: ``myapp.jobs:rmtree``
    where ``myapp.jobs`` only does ``from shutil import rmtree`` is ``shutil.rmtree`` (defined in
    ``shutil``), and ``myapp.jobs:Task.run`` where ``Task`` inherits ``run`` from a class of
    another package runs that package's code. Both are refused, whatever the allowlist says
    about ``myapp``."""
    defined_in = getattr(function, "__module__", None)
    defined_as = getattr(function, "__qualname__", None)
    if defined_in != module or defined_as != qualname:
        raise _refuse(
            name,
            f"{module}.{qualname} is defined as {defined_in}.{defined_as}: a target must be "
            "named where it is defined (an imported or inherited function is not the "
            "importing module's code)",
        )
    if owner is not None:
        owner_name = qualname.rsplit(".", 1)[0]
        if owner.__module__ != module or owner.__qualname__ != owner_name:
            raise _refuse(
                name,
                f"{module}.{owner_name} is the class {owner.__module__}.{owner.__qualname__}: "
                "a target's class must be named where it is defined",
            )


def _describe(fn: Any) -> str:
    module = getattr(fn, "__module__", None) or "?"
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{module}:{qualname}"


def _is_context(annotation: Any) -> bool:
    if annotation is JobContext:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return len(members) == 1 and members[0] is JobContext
    return False


def late_binding(annotation: Any) -> str | None:
    """The kind of a late-bound parameter (``"parent-result"``, ...) or None."""
    for extra in getattr(annotation, "__metadata__", ()):
        if isinstance(extra, LateBound):
            return extra.kind
    return None


def placeholder(kind: str) -> dict[str, str]:
    """What is stored in place of a late-bound argument."""
    return {PLACEHOLDER_KEY: kind}


PLACEHOLDER_KEY = "$ratchet"


def _annotation_text(annotation: Any) -> str:
    if isinstance(annotation, str):
        return annotation
    return inspect.formatannotation(annotation)


def signature_text(parameters: Sequence[inspect.Parameter]) -> str:
    """A stable text of a parameter list: names, kinds and annotations; defaults appear as
    ``...`` (their ``repr`` may differ between processes)."""
    parts: list[str] = []
    seen_keyword_only = False
    for index, param in enumerate(parameters):
        if param.kind is param.KEYWORD_ONLY and not seen_keyword_only:
            seen_keyword_only = True
            parts.append("*")
        prefix = ""
        if param.kind is param.VAR_POSITIONAL:
            prefix, seen_keyword_only = "*", True
        elif param.kind is param.VAR_KEYWORD:
            prefix = "**"
        text = prefix + param.name
        if param.annotation is not param.empty:
            text += f": {_annotation_text(param.annotation)}"
        if param.default is not param.empty:
            text += " = ..."
        parts.append(text)
        if param.kind is param.POSITIONAL_ONLY and (
            index + 1 == len(parameters) or parameters[index + 1].kind is not param.POSITIONAL_ONLY
        ):
            parts.append("/")
    return "(" + ", ".join(parts) + ")"


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
        self._loaded: dict[tuple[str, str, bool], _TargetInfo] = {}
        self._inspected: dict[tuple[str, str], tuple[Any, _TargetInfo]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ enqueue side

    def describe(self, target: Callable[..., Any]) -> _TargetInfo:
        """Locate and vet ``target`` without arguments (the ``LambdaAnalyzer`` view)."""
        name = _describe(target)
        if isinstance(target, functools.partial):
            raise _refuse(
                name,
                "functools.partial objects cannot be stored; enqueue the function "
                "itself and pass the arguments to enqueue",
            )
        if isinstance(target, (staticmethod, classmethod)):
            target = target.__func__
        if inspect.isclass(target):
            raise _refuse(name, "a class is not a job target; enqueue a function or method")
        if inspect.isbuiltin(target) or isinstance(
            target,
            (
                types.MethodWrapperType,
                types.WrapperDescriptorType,
                types.MethodDescriptorType,
                types.BuiltinMethodType,
            ),
        ):
            raise _refuse(
                name,
                "built-in functions cannot be job targets; wrap the call in a "
                "module-level function",
            )
        static_owner: type | None = None
        if inspect.ismethod(target):
            bound_to = target.__self__
            if not inspect.isclass(bound_to):
                cls_name = type(bound_to).__qualname__
                raise _refuse(
                    name,
                    "it is a method bound to an object; pass the unbound method "
                    f"({cls_name}.{target.__name__}) and the worker gets the instance from the "
                    "container",
                )
            static_owner = bound_to
            function = target.__func__
        elif inspect.isfunction(target):
            function = target
        else:
            raise _refuse(
                name,
                f"a {type(target).__name__} object is not a function; enqueue a "
                "module-level function or a method",
            )
        module = getattr(function, "__module__", None)
        qualname = function.__qualname__
        name = f"{module}:{qualname}"
        if function.__name__ == "<lambda>":
            raise _refuse(name, "lambdas cannot be stored; define a module-level function")
        if "<locals>" in qualname:
            kind = "a closure" if function.__closure__ else "a nested function"
            raise _refuse(
                name,
                f"it is {kind} (defined inside another function); the worker "
                "can only import module-level functions and class methods",
            )
        if module is None or module == "__main__":
            raise _refuse(
                name,
                "it is defined in __main__ (the script being run), which the "
                "worker cannot import; move it into an importable module",
            )
        private = [part for part in qualname.split(".") if part.startswith("_")]
        if private:
            raise _refuse(
                name, f"{private[0]!r} is private (starts with '_'); job targets must be public"
            )
        if static_owner is not None and not qualname.startswith(static_owner.__qualname__ + "."):
            raise _refuse(name, "it is bound to a class that does not define it")
        return self._inspect(module, qualname, expected=function, name=name)

    def _import(self, module: str, qualname: str, name: str) -> tuple[Any, Any]:
        """(owner or module, attribute) by name; ``TargetNotImportableError`` if it cannot be
        found (a missing module, a module that fails to import, a missing attribute)."""
        try:
            holder: Any = _import_module(module)
        except Exception as exc:  # any import failure makes the target unusable here
            raise _not_importable(name, f"module {module} cannot be imported ({exc!r})") from exc
        parts = qualname.split(".")
        for part in parts[:-1]:
            holder = getattr(holder, part, None)
            if not inspect.isclass(holder):
                raise _not_importable(
                    name, f"{module}.{qualname} cannot be found by importing {module}"
                )
        try:
            static_attr = inspect.getattr_static(holder, parts[-1])
        except AttributeError:
            raise _not_importable(
                name, f"{module} has no attribute {qualname}: the worker cannot import it"
            ) from None
        return holder, static_attr

    def _inspect(
        self, module: str, qualname: str, *, expected: Callable[..., Any] | None, name: str
    ) -> _TargetInfo:
        holder, attr = self._import(module, qualname, name)
        with self._lock:
            cached = self._inspected.get((module, qualname))
        if cached is not None and cached[0] is attr:
            info = cached[1]
            if expected is not None and info.function is not expected:
                raise _refuse(
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
    ) -> _TargetInfo:
        owner = holder if inspect.isclass(holder) else None
        if isinstance(attr, staticmethod):
            function, call, static = attr.__func__, attr.__func__, True
        elif isinstance(attr, classmethod):
            function, static = attr.__func__, True
            call = getattr(holder, qualname.rsplit(".", 1)[-1])
        elif inspect.isfunction(attr):
            function, call, static = attr, attr, owner is None
        else:
            raise _refuse(name, f"{module}.{qualname} is a {type(attr).__name__}, not a function")
        if expected is not None and function is not expected:
            raise _refuse(
                name,
                f"importing {module}.{qualname} gives a different object (was the function "
                "replaced or re-defined after import?)",
            )
        _check_defined_where_named(module, qualname, owner, function, name)
        if function.__name__ == "<lambda>":
            raise _refuse(name, "lambdas cannot be stored; define a module-level function")
        try:
            hints = typing.get_type_hints(function)
        except Exception as exc:  # unresolvable hints cannot be restored
            raise _refuse(name, f"its type hints cannot be resolved ({exc!r})") from exc
        hints.pop("return", None)
        try:
            params = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError) as exc:
            raise _refuse(name, f"its signature cannot be read ({exc})") from exc
        if not static or isinstance(attr, classmethod):
            if not params or params[0].kind not in (
                inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
            ):
                raise _refuse(name, "a method must take the instance (or class) first")
            params = params[1:]
        context = frozenset(p.name for p in params if _is_context(hints.get(p.name)))
        try:
            extras = typing.get_type_hints(function, include_extras=True)
        except Exception:  # noqa: BLE001 - resolved once above; no markers then
            extras = {}
        late = {
            p.name: kind for p in params if (kind := late_binding(extras.get(p.name))) is not None
        }
        return _TargetInfo(
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

    def _check_policy(self, info: _TargetInfo) -> None:
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
                raise _refuse(info.target, f"parameter {param!r}: {exc}") from exc
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
        self, info: _TargetInfo, args: Sequence[Any], _kwargs: dict[str, Any]
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

    def _prepare(self, target: Callable[..., Any]) -> _TargetInfo:
        info = self.describe(target)
        self._check_policy(info)
        if not info.static:
            self._validate_owner(info)
        return info

    def _build(
        self, info: _TargetInfo, args: Sequence[Any], kwargs: dict[str, Any]
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
        info: _TargetInfo, args: Sequence[Any], kwargs: dict[str, Any]
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

    def _convert(self, info: _TargetInfo, param: str, value: Any) -> Any:
        try:
            return self._serializer.to_json_value(value)
        except PayloadError as exc:
            raise PayloadError(f"argument {param!r} of job target {info.target}: {exc}") from exc

    def _check_restorable(self, info: _TargetInfo, param: str, raw: Any, hint: Any) -> None:
        """Restore ``raw`` as the worker will: a value that does not fit the declared type is
        refused now rather than failing every attempt in a worker."""
        try:
            self._serializer.from_json_value(raw, hint)
        except ClassNotAllowedError:
            raise
        except (PayloadError, ValueError, TypeError) as exc:
            raise InvalidJobError(
                f"cannot enqueue {info.target}: argument {param!r} does not fit its declared "
                f"type {_annotation_text(hint)}: {exc}"
            ) from exc
        # JSON scalars are handed to the target as they are (nothing to restore), so the
        # serializer accepts any of them: check their JSON type against a scalar hint here.
        expected = _scalar_types(hint)
        if expected is not None and not _is_scalar_of(raw, expected):
            raise InvalidJobError(
                f"cannot enqueue {info.target}: argument {param!r} does not fit its declared "
                f"type {_annotation_text(hint)}: got {type(raw).__name__} {raw!r}"
            )

    def _validate_owner(self, info: _TargetInfo) -> None:
        assert info.owner is not None
        if self._beans is None:
            raise _refuse(
                info.target,
                f"it is a method of {type_name(info.owner)} and no BeanResolver is configured "
                "to provide instances",
            )
        try:
            self._beans.validate_resolvable(info.owner)
        except LookupError as exc:
            raise _refuse(
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
            raise _refuse(
                name,
                "the stored invocation has no recorded signature (every job Ratchet enqueues "
                "records one; a payload without it was written by something else)",
            )
        if info.signature != invocation.signature:
            raise _refuse(
                name,
                f"its parameters changed since the job was enqueued: stored "
                f"{invocation.signature}, now {info.signature}",
            )
        marker = getattr(info.function, CIRCUIT_BREAKER_ATTRIBUTE, None)
        return LoadedTarget(
            function=info.call,
            owner_class=None if info.static else info.owner,
            is_async=inspect.iscoroutinefunction(info.function),
            circuit_breaker=marker,
            target=info.target,
            parameters=info.parameters,
            hints=info.hints,
            context_parameters=info.context_parameters,
        )

    def sign(self, invocation: JobInvocation) -> JobInvocation:
        """``invocation`` with the target's current signature recorded when it has none (an
        invocation submitted by name through ``enqueue_invocation``), after the same checks as
        :meth:`load`; unchanged when it has one."""
        if invocation.signature:
            return invocation
        info = self._locate(invocation)
        return attrs.evolve(invocation, signature=info.signature)

    def _locate(self, invocation: JobInvocation) -> _TargetInfo:
        """The stored target, found by name and checked (everything :meth:`load` checks but the
        signature)."""
        name = invocation.target
        key = (invocation.module, invocation.qualname, invocation.static)
        with self._lock:
            info = self._loaded.get(key)
        if info is None:
            qualname = invocation.qualname
            if "<lambda>" in qualname or "<locals>" in qualname:
                raise _refuse(name, "lambdas, closures and nested functions cannot run")
            if invocation.module == "__main__":
                raise _refuse(name, "targets in __main__ cannot run in a worker")
            if any(part.startswith("_") for part in qualname.split(".")):
                raise _refuse(name, "private targets cannot run")
            # Judged by name before anything is imported: a module outside the allowlist must
            # not run its import-time code in a worker because a row names it.
            self._check_names(invocation.module, qualname)
            info = self._inspect(invocation.module, qualname, expected=None, name=name)
            with self._lock:
                self._loaded[key] = info
        if info.static != invocation.static:
            kind = "static" if invocation.static else "a method of a container-provided class"
            raise _refuse(name, f"it was stored as {kind}, but the code no longer matches")
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


_SCALARS = (bool, int, float, str)


def _scalar_types(hint: Any) -> tuple[Any, ...] | None:
    """The scalar types (and ``None``) a hint of only ``bool``/``int``/``float``/``str``
    members (``Optional`` and unions of them included) admits; None for any other hint."""
    if hint in _SCALARS:
        return (hint,)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        members = typing.get_args(hint)
        if all(m in _SCALARS or m is type(None) for m in members):
            return tuple(None if m is type(None) else m for m in members)
    return None


def _is_scalar_of(raw: Any, expected: tuple[Any, ...]) -> bool:
    # bool is an int (as for the type checkers) and an int is accepted where a float is declared
    for kind in expected:
        if kind is None:
            if raw is None:
                return True
        elif isinstance(raw, (int, float) if kind is float else kind):
            return True
    return False


def _positional_names(params: Sequence[inspect.Parameter], count: int) -> list[str]:
    names: list[str] = []
    for param in params:
        if param.kind is param.VAR_POSITIONAL:
            names.extend(f"*{param.name}[{i}]" for i in range(count - len(names)))
            break
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            names.append(param.name)
    names.extend(f"#{i}" for i in range(len(names), count))
    return names


def sign_invocation(loader: object, invocation: JobInvocation) -> JobInvocation:
    """``invocation`` with its target's signature recorded (:meth:`DefaultJobInvocationResolver.
    sign`) when ``loader`` can record it; unchanged otherwise. The enqueue-by-name paths call
    it so that what they store passes the dispatch check of a recorded signature."""
    if invocation.signature or not isinstance(loader, DefaultJobInvocationResolver):
        return invocation
    return loader.sign(invocation)


def check_stored_target(row_target: str, invocation: JobInvocation) -> None:
    """Refuse a payload whose target is not the row's ``target`` column (``InvalidTargetError``):
    listings, filters, flow-control gates and authorization read the column, so a payload
    naming another target would run code that nobody sees in ``ratchet jobs list``."""
    if row_target != invocation.target:
        raise _refuse(
            invocation.target,
            f"the stored payload names {invocation.target} but the job's target column says "
            f"{row_target}: the row was altered after enqueue",
        )


def default_target_loader(
    resolver: JobInvocationResolver,
    serializer: PayloadSerializer,
    class_policy: ClassPolicy,
    bean_resolver: BeanResolver,
) -> TargetLoader:
    """The container's default ``TargetLoader``: the active ``JobInvocationResolver`` when it
    is also a ``TargetLoader`` (the default resolver, or one extending it), else a
    :class:`DefaultJobInvocationResolver` with the same collaborators (a resolver that
    implements only ``resolve`` changes what is accepted at enqueue, not how jobs run)."""
    if isinstance(resolver, TargetLoader):
        return resolver
    return DefaultJobInvocationResolver(
        serializer=serializer, class_policy=class_policy, bean_resolver=bean_resolver
    )


class DefaultLambdaAnalyzer:
    """The compatibility ``LambdaAnalyzer``: the resolver's view of a callable without
    arguments. Refuses the same targets as the resolver (``InvalidTargetError``)."""

    def __init__(self, resolver: JobInvocationResolver) -> None:
        self._resolver = resolver

    def analyze(self, target: Callable[..., Any]) -> LambdaDescriptor:
        if isinstance(self._resolver, DefaultJobInvocationResolver):
            info = self._resolver.describe(target)
            return LambdaDescriptor(
                target_module=info.module,
                qualname=info.qualname,
                signature=info.signature,
                is_static=info.static,
            )
        # another resolver: only its view of a call without arguments is available
        invocation = self._resolver.resolve(target)
        return LambdaDescriptor(
            target_module=invocation.module,
            qualname=invocation.qualname,
            signature=invocation.signature,
            is_static=invocation.static,
        )


__all__ = [
    "CIRCUIT_BREAKER_ATTRIBUTE",
    "DefaultJobInvocationResolver",
    "default_target_loader",
    "DefaultLambdaAnalyzer",
    "LoadedTarget",
    "check_stored_target",
    "circuit_breaker",
    "sign_invocation",
    "signature_text",
]
