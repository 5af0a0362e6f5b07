"""The default JobInvocationResolver: which targets it accepts and refuses at enqueue, what it
stores, and the dispatch-time re-check (load + bind_arguments). Pure logic, no database."""

from __future__ import annotations

import functools
import subprocess
from decimal import Decimal
from typing import Any

import pytest
from dependency_injector import containers, providers

from ratchet_api.errors import (
    ClassNotAllowedError,
    InvalidJobError,
    InvalidTargetError,
    PayloadError,
)
from ratchet_api.model import BackoffPolicy, JobInvocation
from ratchet_core.defaults.beans import ContainerBeanResolver
from ratchet_core.defaults.security import PackagePrefixClassPolicy
from ratchet_core.defaults.targets import DefaultLambdaAnalyzer
from ratchet_core.enqueue.invocation import DefaultJobInvocationResolver, circuit_breaker
from ratchet_core.payload.serialization import CattrsPayloadSerializer
from tests.engine import targets
from tests.engine.targets import Calculator, Order


class AppContainer(containers.DeclarativeContainer):
    calculator = providers.Factory(Calculator)


def make_resolver(*allowed: str) -> DefaultJobInvocationResolver:
    policy = PackagePrefixClassPolicy(allowed or ("tests.",))
    return DefaultJobInvocationResolver(
        CattrsPayloadSerializer(policy), policy, ContainerBeanResolver(AppContainer())
    )


@pytest.fixture
def resolver() -> DefaultJobInvocationResolver:
    return make_resolver()


def test_module_function_is_stored_by_name_with_json_arguments(
    resolver: DefaultJobInvocationResolver,
) -> None:
    inv = resolver.resolve(targets.greet, ["ada"], {"punctuation": "?"})
    assert (inv.module, inv.qualname, inv.static) == ("tests.engine.targets", "greet", True)
    assert inv.signature == "(name: str, punctuation: str = ...)"
    assert inv.args == ("ada",) and dict(inv.kwargs) == {"punctuation": "?"}
    orders = [Order(id=1, item="a", price=Decimal("2.5"))]
    inv = resolver.resolve(targets.total_price, [orders])
    assert inv.args == ([{"id": 1, "item": "a", "price": "2.5"}],)


def test_static_class_and_container_methods(resolver: DefaultJobInvocationResolver) -> None:
    static = resolver.resolve(Calculator.double, [2])
    assert (static.qualname, static.static) == ("Calculator.double", True)
    klass = resolver.resolve(Calculator.triple, [2])
    assert (klass.qualname, klass.static) == ("Calculator.triple", True)
    method = resolver.resolve(Calculator.scale, [2])
    assert (method.qualname, method.static) == ("Calculator.scale", False)
    assert method.signature == "(value: int)"


def test_method_of_a_class_the_container_cannot_provide_is_refused() -> None:
    policy = PackagePrefixClassPolicy(["tests."])
    bare = DefaultJobInvocationResolver(
        CattrsPayloadSerializer(policy),
        policy,
        ContainerBeanResolver(containers.DynamicContainer()),
    )
    with pytest.raises(InvalidTargetError, match=r"Calculator\.scale.*cannot provide"):
        bare.resolve(Calculator.scale, [1])


@pytest.mark.parametrize(
    ("make_target", "why"),
    [
        (lambda: lambda x: x, "lambda"),
        (lambda: targets.make_closure(1), "closure"),
        (targets.make_nested, "nested function"),
        (lambda: targets._private_target, "private"),
        (lambda: Calculator().scale, "bound to an object"),
        (lambda: functools.partial(targets.add, 1), "partial"),
        (lambda: len, "built-in"),
        (lambda: Calculator, "class is not a job target"),
    ],
    ids=["lambda", "closure", "nested", "private", "bound-method", "partial", "builtin", "class"],
)
def test_unstorable_targets_are_refused_naming_the_target(
    resolver: DefaultJobInvocationResolver, make_target: Any, why: str
) -> None:
    target = make_target()
    with pytest.raises(InvalidTargetError, match=why) as info:
        resolver.resolve(target, [1])
    message = str(info.value)
    name = getattr(getattr(target, "func", target), "__qualname__", None) or repr(target)
    assert name.split(".")[-1] in message or "len" in message


def test_target_defined_in_main_is_refused(resolver: DefaultJobInvocationResolver) -> None:
    def script_job() -> None: ...

    script_job.__module__ = "__main__"
    script_job.__qualname__ = "script_job"
    with pytest.raises(InvalidTargetError, match=r"__main__:script_job.*__main__"):
        resolver.resolve(script_job)


def test_function_that_no_longer_matches_its_module_is_refused(
    resolver: DefaultJobInvocationResolver,
) -> None:
    def impostor(a: int, b: int) -> int:
        return a - b

    impostor.__module__ = "tests.engine.targets"
    impostor.__qualname__ = "add"
    with pytest.raises(InvalidTargetError, match="different object"):
        resolver.resolve(impostor, [1, 2])
    impostor.__qualname__ = "no_such_function"
    with pytest.raises(InvalidTargetError, match="has no attribute no_such_function"):
        resolver.resolve(impostor, [1, 2])


def test_a_target_replaced_after_an_enqueue_is_vetted_again(
    resolver: DefaultJobInvocationResolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resolver keeps what it learnt about a target object; once the module (or the owner
    class) holds another object under that name, the kept description is not used."""
    original = targets.add
    assert resolver.resolve(original, [1, 2]).target == "tests.engine.targets:add"

    def add(a: int, b: int) -> int:
        return a - b

    add.__module__, add.__qualname__ = "tests.engine.targets", "add"
    monkeypatch.setattr(targets, "add", add)
    with pytest.raises(InvalidTargetError, match="different object"):
        resolver.resolve(original, [1, 2])
    monkeypatch.setattr(targets, "add", original)
    assert resolver.resolve(original, [1, 2]).args == (1, 2)

    double = Calculator.double
    assert resolver.resolve(double, [2]).target == "tests.engine.targets:Calculator.double"
    monkeypatch.setattr(targets, "Calculator", type("Calculator", (), {}))
    with pytest.raises(InvalidTargetError):
        resolver.resolve(double, [2])


def test_arity_is_checked_at_enqueue_naming_the_target(
    resolver: DefaultJobInvocationResolver,
) -> None:
    with pytest.raises(InvalidJobError, match=r"tests\.engine\.targets:add.*missing a required"):
        resolver.resolve(targets.add, [1])
    with pytest.raises(InvalidJobError, match="unexpected keyword"):
        resolver.resolve(targets.add, [1, 2], {"c": 3})


def test_job_context_parameter_is_not_bound_or_stored(
    resolver: DefaultJobInvocationResolver,
) -> None:
    inv = resolver.resolve(targets.uses_context, [4])
    assert inv.args == (4,)
    with pytest.raises(InvalidJobError, match="JobContext"):
        resolver.resolve(targets.uses_context, [4], {"ctx": None})


def test_argument_without_json_form_is_refused_naming_the_argument(
    resolver: DefaultJobInvocationResolver,
) -> None:
    with pytest.raises(PayloadError, match=r"argument 'value' of job target .*echo_any.*object"):
        resolver.resolve(targets.echo_any, [object()])


def test_classes_outside_the_allowlist_are_refused_at_enqueue(
    resolver: DefaultJobInvocationResolver,
) -> None:
    # named by the target's hints
    with pytest.raises(ClassNotAllowedError, match=r"ratchet_api\.model\.BackoffPolicy"):
        resolver.resolve(targets.takes_outside_class, [{"kind": "FIXED"}])
    # named by an argument value (the hint says Any)
    with pytest.raises(ClassNotAllowedError, match=r"BackoffPolicy.*argument 'value'"):
        resolver.resolve(targets.echo_any, [[BackoffPolicy.fixed(1)]])
    # the target itself
    with pytest.raises(ClassNotAllowedError, match=r"subprocess\.run"):
        make_resolver("tests.").resolve(subprocess.run, [["true"]])
    with pytest.raises(ClassNotAllowedError, match=r"tests\.engine\.targets\.add"):
        make_resolver("myapp").resolve(targets.add, [1, 2])


def test_load_and_bind_restore_typed_arguments(resolver: DefaultJobInvocationResolver) -> None:
    orders = {"x": Order(id=1, item="kiwi", price=Decimal("1"))}
    inv = resolver.resolve(targets.order_items, [orders])
    loaded = resolver.load(inv)
    args, kwargs = resolver.bind_arguments(loaded, inv, None)
    assert args == (orders,) and kwargs == {}
    assert loaded.function(*args, **kwargs) == ["x=kiwi"]

    inv = resolver.resolve(targets.nested_shapes, [[{"a"}], (1, 2)])
    loaded = resolver.load(inv)
    args, kwargs = resolver.bind_arguments(loaded, inv, None)
    assert loaded.function(*args, **kwargs) == [["set"], "tuple", 3]


def test_bind_injects_the_context_and_keeps_defaults(
    resolver: DefaultJobInvocationResolver,
) -> None:
    marker = object()
    inv = resolver.resolve(targets.uses_context, [], {"x": 3})
    loaded = resolver.load(inv)
    assert loaded.context_parameters == frozenset({"ctx"})
    args, kwargs = resolver.bind_arguments(loaded, inv, marker)  # type: ignore[arg-type]
    assert args == (3, marker) and kwargs == {}
    inv = resolver.resolve(targets.greet, ["bo"])
    args, kwargs = resolver.bind_arguments(resolver.load(inv), inv, None)
    assert args == ("bo",) and kwargs == {}


def test_load_of_container_method_reports_the_owner_class(
    resolver: DefaultJobInvocationResolver,
) -> None:
    inv = resolver.resolve(Calculator.scale, [5])
    loaded = resolver.load(inv)
    assert loaded.owner_class is Calculator and not loaded.is_async
    args, _ = resolver.bind_arguments(loaded, inv, None)
    assert loaded.function(Calculator(), *args) == 50
    assert resolver.load(resolver.resolve(targets.async_add, [1, 2])).is_async


def test_load_refuses_a_class_the_policy_no_longer_allows() -> None:
    inv = make_resolver().resolve(targets.total_price, [[]])
    narrower = make_resolver("tests.engine.targets.total_price")
    with pytest.raises(ClassNotAllowedError, match=r"tests\.engine\.targets\.Order"):
        narrower.load(inv)


def test_load_refuses_tampered_invocations(resolver: DefaultJobInvocationResolver) -> None:
    good = resolver.resolve(targets.add, [1, 2])
    cases = {
        "parameters changed": JobInvocation(
            module=good.module, qualname="add", signature="(a: int)"
        ),
        "private": JobInvocation(module=good.module, qualname="_private_target"),
        "cannot be imported": JobInvocation(module="tests.engine.nope", qualname="f"),
        "has no attribute": JobInvocation(module=good.module, qualname="missing"),
        "nested functions": JobInvocation(
            module=good.module, qualname="make_nested.<locals>.nested"
        ),
        "stored as": JobInvocation(module=good.module, qualname="Calculator.scale", static=True),
    }
    for expected, inv in cases.items():
        with pytest.raises(InvalidTargetError) as info:
            resolver.load(inv)
        assert expected in str(info.value)
        assert inv.target in str(info.value)
    with pytest.raises(ClassNotAllowedError, match=r"subprocess\.run"):
        resolver.load(JobInvocation(module="subprocess", qualname="run", args=(["id"],)))


def test_bind_error_names_the_argument(resolver: DefaultJobInvocationResolver) -> None:
    inv = resolver.resolve(targets.total_price, [[]])
    broken = JobInvocation(
        module=inv.module,
        qualname=inv.qualname,
        signature=inv.signature,
        args=([{"id": "one", "item": "x", "price": "1"}],),
    )
    with pytest.raises(PayloadError, match=r"argument 'orders' of job target .*total_price"):
        resolver.bind_arguments(resolver.load(broken), broken, None)


def test_circuit_breaker_marker_reaches_the_loaded_target(
    resolver: DefaultJobInvocationResolver,
) -> None:
    assert resolver.load(resolver.resolve(targets.add, [1, 2])).circuit_breaker is None
    try:
        circuit_breaker(service="payments", ignore=(ValueError,))(targets.add)
        loaded = resolver.load(resolver.resolve(targets.add, [1, 2]))
        assert loaded.circuit_breaker is not None
        service, exception_filter = loaded.circuit_breaker
        assert service == "payments" and exception_filter is not None
        assert exception_filter.classify(ValueError()) is None
    finally:
        del targets.add.__ratchet_circuit_breaker__  # type: ignore[attr-defined]


def test_a_target_loaded_again_is_checked_again_and_reused_only_while_allowed() -> None:
    """The dispatch side keeps the loaded target of a name it checked (one per target, not
    one per job), but every load still asks the ClassPolicy: a target refused after its first
    load is refused at the next dispatch; a no-argument target binds to no arguments."""
    resolver = make_resolver()
    invocation = resolver.resolve(targets.noop, [])
    first = resolver.load(invocation)
    assert resolver.load(invocation) is first
    assert resolver.bind_arguments(first, invocation, None) == ((), {})
    refusing = PackagePrefixClassPolicy(["elsewhere."])
    resolver._policy = refusing  # the policy changed at run time
    with pytest.raises(ClassNotAllowedError, match=r"tests\.engine\.targets\.noop"):
        resolver.load(invocation)


def test_lambda_analyzer_describes_and_refuses_like_the_resolver(
    resolver: DefaultJobInvocationResolver,
) -> None:
    analyzer = DefaultLambdaAnalyzer(resolver)
    descriptor = analyzer.analyze(Calculator.scale)
    assert (descriptor.target_module, descriptor.qualname, descriptor.is_static) == (
        "tests.engine.targets",
        "Calculator.scale",
        False,
    )
    with pytest.raises(InvalidTargetError, match="lambda"):
        analyzer.analyze(lambda: None)
