"""The default PayloadSerializer: what it writes and how it restores from declared types
(pure logic, no database)."""

from __future__ import annotations

import enum
import json
import numbers
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Optional, TypeVar
from uuid import UUID, uuid4

import attrs
import pytest

from ratchet_api.errors import ClassNotAllowedError, PayloadError
from ratchet_core.defaults.security import PackagePrefixClassPolicy
from ratchet_core.payload.serialization import (
    CattrsPayloadSerializer,
    DefaultResultPersistenceStrategy,
)
from tests.engine.targets import Color, Order, Shipment

T = TypeVar("T")


@pytest.fixture
def serializer() -> CattrsPayloadSerializer:
    return CattrsPayloadSerializer(PackagePrefixClassPolicy(["tests."]))


def roundtrip(s: CattrsPayloadSerializer, value: Any, declared: Any) -> Any:
    text = s.serialize(value)
    return s.deserialize(text, declared)


ORDERS = [
    Order(id=1, item="apple", price=Decimal("1.10")),
    Order(id=2, item="pear", price=Decimal("2")),
]


def test_list_of_attrs_orders_is_restored_as_orders(serializer: CattrsPayloadSerializer) -> None:
    restored = roundtrip(serializer, ORDERS, list[Order])
    assert restored == ORDERS
    assert all(type(o) is Order for o in restored)
    assert type(restored[0].price) is Decimal


def test_dict_of_orders_is_restored(serializer: CattrsPayloadSerializer) -> None:
    value = {"a": ORDERS[0], "b": ORDERS[1]}
    assert roundtrip(serializer, value, dict[str, Order]) == value
    assert roundtrip(serializer, value, Mapping[str, Order]) == value


def test_nested_sets_and_tuples_are_restored(serializer: CattrsPayloadSerializer) -> None:
    groups = [{"x", "y"}, {"z"}]
    restored = roundtrip(serializer, groups, list[set[str]])
    assert restored == groups and all(type(g) is set for g in restored)
    assert roundtrip(serializer, (1, 2, 3), tuple[int, ...]) == (1, 2, 3)
    assert roundtrip(serializer, (1, "a"), tuple[int, str]) == (1, "a")
    assert roundtrip(serializer, frozenset({1, 2}), frozenset[int]) == frozenset({1, 2})
    nested = roundtrip(serializer, [(1, {"a"})], list[tuple[int, frozenset[str]]])
    assert nested == [(1, frozenset({"a"}))]


def test_dataclass_with_nested_attrs_datetime_uuid_and_enum_is_restored(
    serializer: CattrsPayloadSerializer,
) -> None:
    shipment = Shipment(
        order=ORDERS[0],
        shipped_at=datetime(2024, 5, 1, 12, 30, tzinfo=timezone(timedelta(hours=2))),
        tracking=uuid4(),
        color=Color.GREEN,
    )
    restored = roundtrip(serializer, shipment, Shipment)
    assert restored == shipment
    assert restored.shipped_at.utcoffset() == timedelta(hours=2)
    assert type(restored.tracking) is UUID and restored.color is Color.GREEN


def test_scalar_standard_types_are_restored(serializer: CattrsPayloadSerializer) -> None:
    now = datetime.now(UTC)
    ident = uuid4()
    assert roundtrip(serializer, now, datetime) == now
    assert roundtrip(serializer, date(2024, 2, 29), date) == date(2024, 2, 29)
    assert roundtrip(serializer, ident, UUID) == ident
    assert roundtrip(serializer, Decimal("0.1"), Decimal) == Decimal("0.1")
    assert roundtrip(serializer, Color.RED, Color) is Color.RED
    assert roundtrip(serializer, 3, float) == 3.0


def test_json_form_is_plain_and_compact(serializer: CattrsPayloadSerializer) -> None:
    text = serializer.serialize(
        {"when": datetime(2024, 1, 1, tzinfo=UTC), "amount": Decimal("1.50"), "tags": {"b", "a"}}
    )
    assert json.loads(text) == {
        "when": "2024-01-01T00:00:00+00:00",
        "amount": "1.50",
        "tags": ["a", "b"],
    }
    assert " " not in text


def test_optional_accepts_none_and_value(serializer: CattrsPayloadSerializer) -> None:
    assert serializer.from_json_value(None, Optional[Order]) is None  # noqa: UP045
    assert serializer.from_json_value(None, Order | None) is None
    data = serializer.to_json_value(ORDERS[0])
    assert serializer.from_json_value(data, Order | None) == ORDERS[0]


def test_missing_any_and_type_variables_keep_raw_values(
    serializer: CattrsPayloadSerializer,
) -> None:
    data = serializer.to_json_value(ORDERS)
    assert serializer.from_json_value(data, Any) == data
    assert serializer.from_json_value(data, list) == data
    assert serializer.from_json_value(data, list[Any]) == data
    # a type variable anywhere makes the whole argument raw, even next to a restorable type
    assert serializer.from_json_value([data, "x"], tuple[list[Order], T]) == [data, "x"]


def test_ambiguous_union_keeps_raw_value(serializer: CattrsPayloadSerializer) -> None:
    data = serializer.to_json_value(ORDERS[0])
    assert serializer.from_json_value(data, Order | Shipment) == data


def test_abstract_element_types_stay_raw_unless_something_else_needs_restoring(
    serializer: CattrsPayloadSerializer,
) -> None:
    orders = serializer.to_json_value(ORDERS)
    # alone, an interface type keeps the raw value
    assert serializer.from_json_value(orders, Iterable[Order]) == orders
    assert serializer.from_json_value([1, 2.5], list[numbers.Number]) == [1, 2.5]
    # next to something that needs restoring, the whole argument is rebuilt
    restored = serializer.from_json_value([orders, 7], tuple[Iterable[Order], numbers.Number])
    assert restored == (ORDERS, 7)
    # Sequence is a container and is restored as a list
    assert serializer.from_json_value(orders, Sequence[Order]) == ORDERS


def test_refuses_values_without_json_form_naming_the_type(
    serializer: CattrsPayloadSerializer,
) -> None:
    class Opaque:
        pass

    with pytest.raises(PayloadError, match="Opaque"):
        serializer.to_json_value([Opaque()])
    with pytest.raises(PayloadError, match="naive"):
        serializer.to_json_value(datetime(2024, 1, 1))
    with pytest.raises(PayloadError, match=r"dict keys must be str.*int"):
        serializer.to_json_value({1: "a"})
    with pytest.raises(PayloadError, match="bytes"):
        serializer.to_json_value(b"raw")
    with pytest.raises(PayloadError, match="nan"):
        serializer.to_json_value(float("nan"))


def test_restore_errors_name_the_path_and_are_value_errors(
    serializer: CattrsPayloadSerializer,
) -> None:
    with pytest.raises(ValueError) as info:
        serializer.from_json_value([{"id": "seven", "item": "x", "price": "1"}], list[Order])
    assert isinstance(info.value, PayloadError)
    assert "$[0].id" in str(info.value) and "expected an integer" in str(info.value)
    with pytest.raises(PayloadError, match="time zone"):
        serializer.from_json_value("2024-01-01T00:00:00", datetime)
    with pytest.raises(PayloadError):
        serializer.deserialize("{not json", Any)


def test_json_never_selects_a_class(serializer: CattrsPayloadSerializer) -> None:
    hostile = {"__class__": "os.system", "py/object": "subprocess.Popen", "id": 1}
    assert serializer.from_json_value(hostile, Any) == hostile
    assert serializer.from_json_value(hostile, dict[str, Any]) == hostile


def test_classes_named_by_hints_pass_the_policy_first() -> None:
    strict = CattrsPayloadSerializer(PackagePrefixClassPolicy(["myapp"]))
    with pytest.raises(ClassNotAllowedError, match=r"tests\.engine\.targets\.Order"):
        strict.from_json_value([], list[Order])
    # nested classes of a record are vetted too
    permissive_outer = CattrsPayloadSerializer(
        PackagePrefixClassPolicy(["tests.engine.targets.Shipment", "tests.engine.targets.Color"])
    )
    with pytest.raises(ClassNotAllowedError, match="Order"):
        permissive_outer.from_json_value({}, Shipment)


def test_standard_types_never_reach_the_policy() -> None:
    asked: list[str] = []

    class RecordingPolicy:
        def is_allowed(self, class_name: str) -> bool:
            asked.append(class_name)
            return True

    s = CattrsPayloadSerializer(RecordingPolicy())
    s.from_json_value(["2024-01-01T00:00:00+00:00"], list[datetime])
    s.from_json_value({"a": "1"}, dict[str, Decimal])
    s.from_json_value([str(uuid4())], set[UUID])
    assert asked == []
    assert s.classes_in(dict[str, list[Shipment]]) == [
        "tests.engine.targets.Shipment",
        "tests.engine.targets.Order",
        "tests.engine.targets.Color",
    ]


class Level(enum.IntEnum):
    LOW = 1


@attrs.frozen
class _Private:
    _secret: int


def test_enum_values_and_private_attrs_fields(serializer: CattrsPayloadSerializer) -> None:
    assert serializer.to_json_value(Level.LOW) == 1
    assert serializer.to_json_value(_Private(3)) == {"_secret": 3}


def test_result_strategy_stores_json_and_type_name(serializer: CattrsPayloadSerializer) -> None:
    strategy = DefaultResultPersistenceStrategy(serializer)
    job_id = uuid4()
    stored = strategy.serialize(job_id, ORDERS[0])
    assert stored.type_name == "tests.engine.targets.Order"
    assert json.loads(stored.json or "") == {"id": 1, "item": "apple", "price": "1.10"}
    assert strategy.serialize(job_id, None).json is None
    assert strategy.serialize(job_id, 5).type_name == "int"
    with pytest.raises(PayloadError, match=str(job_id)):
        strategy.serialize(job_id, object())
