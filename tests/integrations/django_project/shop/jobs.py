"""Ratchet job targets and Django tasks of the test project."""

from __future__ import annotations

from django.db import connections
from django_tasks import task

from tests.integrations.django_project.shop.models import Order


def process_order(order_id: int, alias: str) -> str:
    """Mark the order processed through the ORM (proves the job ran in the worker)."""
    try:
        updated = Order.objects.using(alias).filter(pk=order_id).update(processed=True)
        return f"processed {updated}"
    finally:
        connections.close_all()


@task()
def multiply(a: int, b: int) -> int:
    return a * b


@task()
def explode(message: str) -> None:
    raise ValueError(message)


def greet(name: str) -> str:
    """A plain job for the command-line tests (``manage.py ratchet_enqueue``)."""
    return f"hello {name}"


@task()
def echo(value: object, **extra: object) -> object:
    """Returns what it was given (argument normalisation is visible in the result)."""
    return value


@task()
def nap(seconds: float) -> float:
    import time

    time.sleep(seconds)
    return seconds


@task()
def always_fails(token: str) -> None:
    try:
        raise KeyError(token)
    except KeyError as exc:
        raise RuntimeError(f"payment with token={token} declined") from exc


@task()
def wait_for_file(started: str, release: str, limit: float) -> str:
    """Writes ``started``, then returns once ``release`` exists (at most ``limit`` seconds):
    a task that is running for as long as a test wants, without sleeping a guessed time."""
    import time
    from pathlib import Path

    Path(started).touch()
    deadline = time.monotonic() + limit
    while not Path(release).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{release} was not created within {limit}s")
        time.sleep(0.01)
    return "released"


@task()
def returns_a_set() -> object:
    return {1, 2}


@task()
def returns_a_nested_object() -> object:
    return {"ok": [1, "two"], "bad": [object()]}
