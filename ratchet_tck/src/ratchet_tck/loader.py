"""Opening a store fixture named by an import path (``pkg.module:factory``)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from ratchet_tck.fixture import StoreFixture


class FixtureSpecError(ValueError):
    """The ``--fixture`` import path does not name a usable fixture factory."""


def resolve(spec: str) -> Any:
    """Import ``pkg.module:attr`` (``attr`` may be dotted)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise FixtureSpecError(f"fixture {spec!r} must look like 'package.module:factory'")
    # like ``python -m``: modules of the current directory are importable
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise FixtureSpecError(f"fixture {spec!r}: cannot import {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise FixtureSpecError(f"fixture {spec!r}: {module_name} has no {attr!r}") from None
    if not callable(obj):
        raise FixtureSpecError(f"fixture {spec!r} is not callable")
    return obj


@contextmanager
def open_fixture(spec: str) -> Iterator[StoreFixture]:
    """Call the zero-argument factory; enter it when it returns a context manager."""
    made = resolve(spec)()
    if isinstance(made, AbstractContextManager):
        with made as fixture:
            yield _checked(spec, fixture)
    else:
        yield _checked(spec, made)


def _checked(spec: str, fixture: object) -> StoreFixture:
    if not isinstance(fixture, StoreFixture):
        raise FixtureSpecError(
            f"fixture {spec!r} produced {type(fixture).__name__}, which lacks the StoreFixture "
            "methods store(), new_pending_job(), new_batch_parent_job(), cleanup_store() and "
            "store_factory() (subclass ratchet_tck.BaseStoreFixture)"
        )
    return fixture
