"""The default ``PayloadSerializer`` (JSON through a private cattrs ``Converter``) and the default
``ResultPersistenceStrategy``.

Converting *to* JSON works on values: attrs and dataclass instances become objects, aware
datetimes and dates ISO 8601 strings, UUIDs and Decimals strings, enums their value, sets,
frozensets and tuples lists, dicts need string keys. Anything else is refused with a
``PayloadError`` naming the value's type.

Restoring *from* JSON works on declared types only (JSON never selects a class). How a declared
type is treated, node by node:

* ``datetime``, ``date``, ``UUID``, ``Decimal``, enums, attrs and dataclass classes, ``set``,
  ``frozenset`` and ``tuple`` need restoring (JSON has no such values); ``list``, ``dict``,
  ``Sequence``, ``Mapping``, ``AbstractSet`` (and their mutable forms) are containers whose
  elements are restored; ``str``, ``int``, ``float``, ``bool`` and ``None`` are checked.
* A type variable anywhere in an argument's type makes the whole argument raw.
* ``Any``, ``object``, abstract classes, protocols, ambiguous unions (``Order | Customer``) and
  unknown classes are opaque: their value stays raw.
* ``Iterable[X]``, ``Collection[X]`` and ``Reversible[X]`` (interfaces that are not containers)
  stay raw unless something else in the same argument needs restoring; then the whole argument
  is rebuilt and they become lists.
* When nothing in an argument needs restoring, the JSON value is returned unchanged.

Every user class named by a declared type (not builtins or standard-library types) passes the
``ClassPolicy`` before anything is restored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import inspect
import json
import math
import sys
import types
import typing
from collections import abc as cabc
from collections.abc import Callable, Iterator
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar
from uuid import UUID

import attrs
import cattrs

from ratchet_api.errors import ClassNotAllowedError, PayloadError
from ratchet_api.model import SerializedJobResult
from ratchet_api.spi import RatchetConfig
from ratchet_api.spi.payload import PayloadSerializer
from ratchet_api.spi.policies import ClassPolicy
from ratchet_core.payload.forms import dumps_compact
from ratchet_core.payload.limits import Limits

_MAX_DEPTH = 200

_LIST_ORIGINS: frozenset[Any] = frozenset(
    {list, cabc.Sequence, cabc.MutableSequence, typing.List}  # noqa: UP006
)
_SET_ORIGINS: frozenset[Any] = frozenset({set, cabc.MutableSet, typing.Set})  # noqa: UP006
_ABSTRACT_SET_ORIGINS: frozenset[Any] = frozenset({cabc.Set, typing.AbstractSet})
_FROZENSET_ORIGINS: frozenset[Any] = frozenset({frozenset, typing.FrozenSet})  # noqa: UP006
_DICT_ORIGINS: frozenset[Any] = frozenset(
    {dict, cabc.Mapping, cabc.MutableMapping, typing.Dict}  # noqa: UP006
)
_INTERFACE_ORIGINS: frozenset[Any] = frozenset(
    {cabc.Iterable, cabc.Collection, cabc.Reversible, typing.Iterable, typing.Collection}
)
_LEAF_TYPES: frozenset[type] = frozenset({datetime, date, UUID, Decimal})
_NATIVE_TYPES: frozenset[type] = frozenset({str, int, float, bool})


def type_name(tp: Any) -> str:
    """``module.QualName`` of a class (``int`` for builtins), else ``repr``."""
    if isinstance(tp, type):
        if tp.__module__ == "builtins":
            return tp.__qualname__
        return f"{tp.__module__}.{tp.__qualname__}"
    return repr(tp)


def is_standard_class(cls: type) -> bool:
    """True for builtins and standard-library classes (never sent to the ``ClassPolicy``)."""
    top = (cls.__module__ or "").split(".", 1)[0]
    return top == "builtins" or top in sys.stdlib_module_names


def _is_abstract(cls: type) -> bool:
    return bool(getattr(cls, "_is_protocol", False)) or inspect.isabstract(cls)


def _is_record(cls: type) -> bool:
    return attrs.has(cls) or dataclasses.is_dataclass(cls)


def _record_hints(cls: type) -> dict[str, Any]:
    """Declared types of the init fields of an attrs/dataclass class."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception as exc:
        raise PayloadError(f"type hints of {type_name(cls)} cannot be resolved: {exc}") from exc
    if attrs.has(cls):
        names = [a.name for a in attrs.fields(cls) if a.init]
    else:
        names = [f.name for f in dataclasses.fields(cls) if f.init]
    return {name: hints.get(name, Any) for name in names}


class _Plan:
    """Result of analysing one declared type."""

    __slots__ = ("classes", "needs_restore", "poisoned")

    def __init__(self) -> None:
        self.classes: list[str] = []
        self.needs_restore = False
        self.poisoned = False


def _walk(declared: Any, plan: _Plan, seen: set[type]) -> Any:
    """Record what ``declared`` needs into ``plan`` and return the type cattrs should structure
    with (opaque nodes replaced by ``Any``)."""
    if declared is None or declared is type(None):
        return type(None)
    if declared is Any or declared is object:
        return Any
    if isinstance(declared, (TypeVar, typing.ParamSpec)):
        plan.poisoned = True
        return Any
    if isinstance(declared, str | typing.ForwardRef):
        # an unresolved forward reference: nothing can be restored faithfully
        return Any
    supertype = getattr(declared, "__supertype__", None)
    if supertype is not None:  # typing.NewType
        return _walk(supertype, plan, seen)
    origin = typing.get_origin(declared)
    if origin is typing.Annotated:
        return _walk(typing.get_args(declared)[0], plan, seen)
    if origin is typing.Literal or origin is typing.ClassVar:
        return Any
    if origin is typing.Union or origin is types.UnionType:
        members = [a for a in typing.get_args(declared) if a is not type(None)]
        optional = len(members) < len(typing.get_args(declared))
        if len(members) == 1:
            inner = _walk(members[0], plan, seen)
            return typing.Optional[inner] if optional else inner  # noqa: UP045
        # ambiguous: its classes are still vetted, its value stays raw
        for member in members:
            sub = _Plan()
            _walk(member, sub, seen)
            plan.classes.extend(sub.classes)
            plan.poisoned = plan.poisoned or sub.poisoned
        return Any
    if origin is not None:
        args = typing.get_args(declared)
        if origin in _LIST_ORIGINS:
            return list[_walk(args[0], plan, seen) if args else Any]  # type: ignore[misc]
        if origin in _SET_ORIGINS or origin in _ABSTRACT_SET_ORIGINS:
            plan.needs_restore = True
            return set[_walk(args[0], plan, seen) if args else Any]  # type: ignore[misc]
        if origin in _FROZENSET_ORIGINS:
            plan.needs_restore = True
            return frozenset[_walk(args[0], plan, seen) if args else Any]  # type: ignore[misc]
        if origin is tuple:
            plan.needs_restore = True
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple[_walk(args[0], plan, seen), ...]  # type: ignore[misc]
            if args == ((),):
                return tuple[()]
            inner = tuple(_walk(a, plan, seen) for a in args)
            return tuple[inner] if inner else tuple[Any, ...]  # type: ignore[valid-type]
        if origin in _DICT_ORIGINS:
            key = _walk(args[0], plan, seen) if args else Any
            value = _walk(args[1], plan, seen) if len(args) > 1 else Any
            return dict[key, value]  # type: ignore[valid-type]
        if origin in _INTERFACE_ORIGINS:
            # raw unless something else in the argument needs restoring
            sub = _Plan()
            element = _walk(args[0], sub, seen) if args else Any
            plan.classes.extend(sub.classes)
            plan.poisoned = plan.poisoned or sub.poisoned
            return list[element]  # type: ignore[valid-type]
        if isinstance(origin, type) and _is_record(origin):
            # a parametrized generic attrs/dataclass class
            for arg in args:
                _walk(arg, plan, seen)
            _walk(origin, plan, seen)
            return declared
        return Any
    if not isinstance(declared, type):
        return Any
    cls: type = declared
    if cls in _NATIVE_TYPES:
        return cls
    if cls in _LEAF_TYPES:
        plan.needs_restore = True
        return cls
    if cls is tuple:
        return _walk(tuple[Any, ...], plan, seen)
    if cls in (list, set, frozenset, dict):
        return _walk(cls[Any], plan, seen)
    if issubclass(cls, enum.Enum):
        if not is_standard_class(cls):
            plan.classes.append(type_name(cls))
        plan.needs_restore = True
        return cls
    if _is_record(cls):
        if not is_standard_class(cls):
            plan.classes.append(type_name(cls))
        plan.needs_restore = True
        if cls not in seen:
            seen.add(cls)
            for field_type in _record_hints(cls).values():
                sub = _Plan()
                _walk(field_type, sub, seen)
                plan.classes.extend(sub.classes)
        return cls
    if _is_abstract(cls) or is_standard_class(cls):
        return Any
    # a concrete user class the serializer cannot rebuild: vetted, kept raw
    plan.classes.append(type_name(cls))
    return Any


class CattrsPayloadSerializer:
    """JSON payloads through a private cattrs ``Converter``; see the module docstring for the
    rules. Thread safe (analyses of declared types are cached)."""

    def __init__(self, class_policy: ClassPolicy) -> None:
        self._policy = class_policy
        self._converter = cattrs.Converter(detailed_validation=True)
        self._install_hooks()
        self._plans: dict[Any, tuple[tuple[str, ...], bool, Any]] = {}

    # ------------------------------------------------------------ to JSON

    def to_json_value(self, value: Any) -> Any:
        return self._to_json(value, 0)

    def _to_json(self, value: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise PayloadError(f"value nests deeper than {_MAX_DEPTH} levels (a reference cycle?)")
        if value is None or isinstance(value, (str, bool)):
            return value
        if isinstance(value, enum.Enum):
            return self._to_json(value.value, depth + 1)
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                raise PayloadError(f"float value {value!r} has no JSON form")
            return value
        if isinstance(value, datetime):
            if value.tzinfo is None or value.utcoffset() is None:
                raise PayloadError(
                    f"datetime {value.isoformat()} is naive; pass a timezone-aware datetime "
                    "(for example datetime.now(timezone.utc))"
                )
            return value.isoformat()
        if isinstance(value, date):
            return value.isoformat()
        if isinstance(value, UUID):
            return str(value)
        if isinstance(value, Decimal):
            if not value.is_finite():
                raise PayloadError(f"Decimal value {value} has no JSON form")
            return str(value)
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise PayloadError(
                        f"dict keys must be str, got a key of type {type_name(type(key))} ({key!r})"
                    )
                out[key] = self._to_json(item, depth + 1)
            return out
        if isinstance(value, (list, tuple)):
            return [self._to_json(item, depth + 1) for item in value]
        if isinstance(value, (set, frozenset)):
            items = [self._to_json(item, depth + 1) for item in value]
            try:
                return sorted(items)
            except TypeError:
                return items
        cls = type(value)
        if attrs.has(cls):
            return {
                a.name: self._to_json(getattr(value, a.name), depth + 1)
                for a in attrs.fields(cls)
                if a.init
            }
        if dataclasses.is_dataclass(cls):
            return {
                f.name: self._to_json(getattr(value, f.name), depth + 1)
                for f in dataclasses.fields(cls)
                if f.init
            }
        raise PayloadError(
            f"a value of type {type_name(cls)} cannot be stored as JSON; use attrs or dataclass "
            "classes, str, int, float, bool, None, lists, tuples, sets, dicts with str keys, "
            "datetime (aware), date, UUID, Decimal or enums"
        )

    def serialize(self, payload: Any) -> str:
        data = self.to_json_value(payload)
        try:
            return dumps_compact(data)
        except (TypeError, ValueError) as exc:  # pragma: no cover - to_json_value guards this
            raise PayloadError(f"cannot write JSON: {exc}") from exc

    # ------------------------------------------------------------ from JSON

    def classes_in(self, declared: Any) -> list[str]:
        return list(self._plan(declared)[0])

    def _plan(self, declared: Any) -> tuple[tuple[str, ...], bool, Any]:
        try:
            cached = self._plans.get(declared)
        except TypeError:  # unhashable annotation object
            cached = None
        if cached is not None:
            return cached
        plan = _Plan()
        structure_type = _walk(declared, plan, set())
        result = (
            tuple(dict.fromkeys(plan.classes)),
            plan.needs_restore and not plan.poisoned,
            structure_type,
        )
        with contextlib.suppress(TypeError):
            self._plans[declared] = result
        return result

    def from_json_value(self, data: Any, declared: Any) -> Any:
        classes, restore, structure_type = self._plan(declared)
        for name in classes:
            if not self._policy.is_allowed(name):
                raise ClassNotAllowedError(name, "named by a declared argument type")
        if not restore or (data is None and _allows_none(structure_type)):
            return data
        try:
            return self._converter.structure(data, structure_type)
        except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
            raise PayloadError(
                f"cannot restore {_describe_type(declared)} from JSON: {_explain(exc)}"
            ) from exc

    def deserialize(self, text: str | None, declared: Any = Any) -> Any:
        if text is None or text == "":
            return None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise PayloadError(f"not valid JSON: {exc}") from exc
        return self.from_json_value(data, declared)

    # ------------------------------------------------------------ converter hooks

    def _install_hooks(self) -> None:
        conv = self._converter

        def strict(expected: type, name: str) -> Callable[[Any, Any], Any]:
            def hook(value: Any, _: Any) -> Any:
                if isinstance(value, bool) and expected is not bool:
                    raise TypeError(f"expected {name}, got bool")
                if expected is float and isinstance(value, int):
                    return float(value)
                if not isinstance(value, expected):
                    raise TypeError(f"expected {name}, got {_json_kind(value)}")
                return value

            return hook

        conv.register_structure_hook(str, strict(str, "a string"))
        conv.register_structure_hook(int, strict(int, "an integer"))
        conv.register_structure_hook(float, strict(float, "a number"))
        conv.register_structure_hook(bool, strict(bool, "true or false"))

        def structure_datetime(value: Any, _: Any) -> datetime:
            if not isinstance(value, str):
                raise TypeError(f"expected an ISO 8601 string, got {_json_kind(value)}")
            parsed = datetime.fromisoformat(value)
            if parsed.tzinfo is None:
                raise ValueError(f"datetime {value!r} has no time zone")
            return parsed

        def structure_date(value: Any, _: Any) -> date:
            if not isinstance(value, str):
                raise TypeError(f"expected an ISO 8601 date string, got {_json_kind(value)}")
            return date.fromisoformat(value)

        def structure_uuid(value: Any, _: Any) -> UUID:
            if not isinstance(value, str):
                raise TypeError(f"expected a UUID string, got {_json_kind(value)}")
            return UUID(value)

        def structure_decimal(value: Any, _: Any) -> Decimal:
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise TypeError(f"expected a decimal string, got {_json_kind(value)}")
            try:
                return Decimal(str(value))
            except InvalidOperation:
                raise ValueError(f"{value!r} is not a decimal number") from None

        conv.register_structure_hook(datetime, structure_datetime)
        conv.register_structure_hook(date, structure_date)
        conv.register_structure_hook(UUID, structure_uuid)
        conv.register_structure_hook(Decimal, structure_decimal)


def _allows_none(structure_type: Any) -> bool:
    if structure_type is Any or structure_type is type(None):
        return True
    return type(None) in typing.get_args(structure_type)


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _describe_type(declared: Any) -> str:
    if isinstance(declared, type):
        return type_name(declared)
    return str(declared).replace("typing.", "")


def _format_error(exc: BaseException, _type: Any) -> str:
    if isinstance(exc, KeyError):
        return "required field missing"
    return str(exc) or type(exc).__name__


def _explain(exc: BaseException) -> str:
    if isinstance(exc, cattrs.BaseValidationError):
        lines = cattrs.transform_error(exc, path="$", format_exception=_format_error)
        return "; ".join(lines[:5]) + (f" (and {len(lines) - 5} more)" if len(lines) > 5 else "")
    return str(exc) or type(exc).__name__


def value_classes(value: Any) -> Iterator[str]:
    """Dotted names of the user classes (attrs, dataclass, enum; not standard-library ones)
    found in an argument value, for the ``ClassPolicy`` at enqueue."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        current, depth = stack.pop()
        if depth > _MAX_DEPTH or current is None or isinstance(current, (str, int, float)):
            continue
        cls = type(current)
        if isinstance(current, enum.Enum):
            if not is_standard_class(cls):
                yield type_name(cls)
        elif isinstance(current, dict):
            stack.extend((v, depth + 1) for v in current.values())
        elif isinstance(current, (list, tuple, set, frozenset)):
            stack.extend((v, depth + 1) for v in current)
        elif attrs.has(cls) or dataclasses.is_dataclass(cls):
            if not is_standard_class(cls):
                yield type_name(cls)
            names = (
                [a.name for a in attrs.fields(cls)]
                if attrs.has(cls)
                else [f.name for f in dataclasses.fields(current)]
            )
            stack.extend((getattr(current, n), depth + 1) for n in names)


class DefaultResultPersistenceStrategy:
    """Stores a return value as JSON through the ``PayloadSerializer`` with its type name;
    ``None`` is stored as no result. A value the serializer refuses raises ``PayloadError``
    naming the job (the worker then fails the attempt), and a result over
    ``limits.max_result_bytes`` raises ``LimitExceededError`` naming that key."""

    def __init__(
        self, serializer: PayloadSerializer, settings: RatchetConfig | None = None
    ) -> None:
        self._serializer = serializer
        self._limits = Limits() if settings is None else Limits.from_settings(settings)

    def serialize(self, job_id: UUID, result: Any) -> SerializedJobResult:
        if result is None:
            return SerializedJobResult(json=None, type_name=None)
        try:
            text = self._serializer.serialize(result)
        except PayloadError as exc:
            raise PayloadError(f"return value of job {job_id} cannot be stored: {exc}") from exc
        self._limits.check_result(text, f"job {job_id}")
        return SerializedJobResult(json=text, type_name=type_name(type(result)))


__all__ = [
    "CattrsPayloadSerializer",
    "DefaultResultPersistenceStrategy",
    "is_standard_class",
    "type_name",
    "value_classes",
]
