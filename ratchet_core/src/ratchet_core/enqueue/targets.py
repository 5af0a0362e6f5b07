"""Job targets by name: what the resolver (:mod:`ratchet_core.enqueue.invocation`) knows about a target
without its state: the ``@circuit_breaker`` marker, the located-and-checked target at dispatch
(``LoadedTarget``), the refusals of targets the worker could not import again by name, the check
that a name is where the code is defined, and the comparison of stored and current signatures.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from ratchet_api.errors import (
    InvalidTargetError,
    TargetNotImportableError,
)
from ratchet_api.model import CircuitBreakerExceptionFilter, JobInvocation
from ratchet_api.scheduler import JobContext
from ratchet_api.workflow import LateBound

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
class TargetInfo:
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


def refuse(target: str, why: str) -> InvalidTargetError:
    return InvalidTargetError(f"job target {target} is refused: {why}")


def not_importable(target: str, why: str) -> TargetNotImportableError:
    return TargetNotImportableError(f"job target {target} is refused: {why}")


DESCRIBED_MAX = 4096
"""Target objects whose description the resolver keeps (then it starts again): bounds the memory
of code that creates new function objects for ever."""


@attrs.frozen
class NameChain:
    """What importing a target by name gave: the module as ``sys.modules`` holds it, then each
    ``(parent, name, object)`` step down to the attribute, each found in its parent's own
    ``__dict__``. :meth:`holds` is true while importing the name would give the same objects
    (a few dict lookups, where importing and ``inspect.getattr_static`` cost tens of µs)."""

    module: str
    module_object: Any
    steps: tuple[tuple[Any, str, Any], ...]

    @classmethod
    def of(cls, module: str, qualname: str) -> NameChain | None:
        """None when a step is not in its parent's own ``__dict__`` (an inherited method)."""
        holder = sys.modules.get(module)
        if holder is None:
            return None
        first, steps = holder, []
        for part in qualname.split("."):
            child = vars(holder).get(part)
            if child is None:
                return None
            steps.append((holder, part, child))
            holder = child
        return cls(module, first, tuple(steps))

    def holds(self) -> bool:
        if sys.modules.get(self.module) is not self.module_object:
            return False
        return all(vars(parent).get(name) is child for parent, name, child in self.steps)


def import_module(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError:
        # The finders cache directory listings: a module deployed since the last attempt is
        # found only once the caches are dropped.
        importlib.invalidate_caches()
        return importlib.import_module(module)


def check_defined_where_named(
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
        raise refuse(
            name,
            f"{module}.{qualname} is defined as {defined_in}.{defined_as}: a target must be "
            "named where it is defined (an imported or inherited function is not the "
            "importing module's code)",
        )
    if owner is not None:
        owner_name = qualname.rsplit(".", 1)[0]
        if owner.__module__ != module or owner.__qualname__ != owner_name:
            raise refuse(
                name,
                f"{module}.{owner_name} is the class {owner.__module__}.{owner.__qualname__}: "
                "a target's class must be named where it is defined",
            )


def _describe(fn: Any) -> str:
    module = getattr(fn, "__module__", None) or "?"
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{module}:{qualname}"


def is_context(annotation: Any) -> bool:
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


def annotation_text(annotation: Any) -> str:
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
            text += f": {annotation_text(param.annotation)}"
        if param.default is not param.empty:
            text += " = ..."
        parts.append(text)
        if param.kind is param.POSITIONAL_ONLY and (
            index + 1 == len(parameters) or parameters[index + 1].kind is not param.POSITIONAL_ONLY
        ):
            parts.append("/")
    return "(" + ", ".join(parts) + ")"


def locate_function(target: Callable[..., Any]) -> tuple[str, str, Callable[..., Any], str]:
    """``(module, qualname, function, name)`` of a job target, refused with
    ``InvalidTargetError`` when the worker could not import it again by name (see
    :mod:`ratchet_core.enqueue.invocation`)."""
    name = _describe(target)
    if isinstance(target, functools.partial):
        raise refuse(
            name,
            "functools.partial objects cannot be stored; enqueue the function "
            "itself and pass the arguments to enqueue",
        )
    if isinstance(target, (staticmethod, classmethod)):
        target = target.__func__
    if inspect.isclass(target):
        raise refuse(name, "a class is not a job target; enqueue a function or method")
    if inspect.isbuiltin(target) or isinstance(
        target,
        (
            types.MethodWrapperType,
            types.WrapperDescriptorType,
            types.MethodDescriptorType,
            types.BuiltinMethodType,
        ),
    ):
        raise refuse(
            name,
            "built-in functions cannot be job targets; wrap the call in a module-level function",
        )
    static_owner: type | None = None
    if inspect.ismethod(target):
        bound_to = target.__self__
        if not inspect.isclass(bound_to):
            cls_name = type(bound_to).__qualname__
            raise refuse(
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
        raise refuse(
            name,
            f"a {type(target).__name__} object is not a function; enqueue a "
            "module-level function or a method",
        )
    module = getattr(function, "__module__", None)
    qualname = function.__qualname__
    name = f"{module}:{qualname}"
    if function.__name__ == "<lambda>":
        raise refuse(name, "lambdas cannot be stored; define a module-level function")
    if "<locals>" in qualname:
        kind = "a closure" if function.__closure__ else "a nested function"
        raise refuse(
            name,
            f"it is {kind} (defined inside another function); the worker "
            "can only import module-level functions and class methods",
        )
    if module is None or module == "__main__":
        raise refuse(
            name,
            "it is defined in __main__ (the script being run), which the "
            "worker cannot import; move it into an importable module",
        )
    private = [part for part in qualname.split(".") if part.startswith("_")]
    if private:
        raise refuse(
            name, f"{private[0]!r} is private (starts with '_'); job targets must be public"
        )
    if static_owner is not None and not qualname.startswith(static_owner.__qualname__ + "."):
        raise refuse(name, "it is bound to a class that does not define it")
    return module, qualname, function, name


_SCALARS = (bool, int, float, str)


def scalar_types(hint: Any) -> tuple[Any, ...] | None:
    """The scalar types (and ``None``) a hint of only ``bool``/``int``/``float``/``str``
    members (``Optional`` and unions of them included) admits; None for any other hint."""
    if hint in _SCALARS:
        return (hint,)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        members = typing.get_args(hint)
        if all(m in _SCALARS or m is type(None) for m in members):
            return tuple(None if m is type(None) else m for m in members)
    return None


def is_scalar_of(raw: Any, expected: tuple[Any, ...]) -> bool:
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


def check_stored_target(row_target: str, invocation: JobInvocation) -> None:
    """Refuse a payload whose target is not the row's ``target`` column (``InvalidTargetError``):
    listings, filters, flow-control gates and authorization read the column, so a payload
    naming another target would run code that nobody sees in ``ratchet jobs list``."""
    if row_target != invocation.target:
        raise refuse(
            invocation.target,
            f"the stored payload names {invocation.target} but the job's target column says "
            f"{row_target}: the row was altered after enqueue",
        )
