"""Import dependency-injector without importing web frameworks the application does not use.

``dependency_injector.wiring`` (imported by its ``containers`` module) tries, at import time,
``fastapi.params``, ``fast_depends``, ``starlette.requests`` and ``werkzeug.local`` so that it can
recognise their markers later. With those packages merely *installed* (``ratchet-core[fastapi]``),
that costs a worker over a second of start-up and tens of MiB of memory for frameworks it never
touches. :func:`import_dependency_injector` imports dependency-injector with those frameworks
hidden (unless the process already imported them) and then registers the same recognisers in a
lazy form: each looks the framework up in ``sys.modules`` when wiring inspects a parameter, so an
application that does use FastAPI's ``Depends(Provide[...])`` or a Flask ``LocalProxy`` is wired
exactly as before (by then it has imported its framework).

``dependency_injector.providers`` also imports ``pydantic`` (about 5 MiB) only to learn whether
it is version 1, whose ``BaseSettings`` ``Configuration.from_pydantic`` would accept; with
pydantic 2 that needs ``pydantic_settings``, which it imports first. So when
``pydantic_settings`` is not installed and the installed pydantic is not 1.x, hiding pydantic
changes nothing in dependency-injector and saves the memory.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

_HIDDEN = ("fastapi", "fast_depends", "starlette", "werkzeug")


def _module_attr(module: str, name: str) -> Any:
    loaded = sys.modules.get(module)
    return getattr(loaded, name, None) if loaded is not None else None


def _fastapi_marker(param: Any) -> Any:
    depends = _module_attr("fastapi.params", "Depends")
    if depends is not None and isinstance(param, depends):
        return param.dependency
    return None


def _fast_depends_marker(param: Any) -> Any:
    for module, name in (
        ("fast_depends.dependencies.model", "Dependant"),
        ("fast_depends.dependencies", "Depends"),
    ):
        kind = _module_attr(module, name)
        if isinstance(kind, type) and isinstance(param, kind):
            return getattr(param, "dependency", None)
    return None


def _is_starlette_request_class(obj: Any) -> bool:
    request = _module_attr("starlette.requests", "Request")
    try:
        return isinstance(obj, type) and request is not None and issubclass(obj, request)
    except TypeError:
        return False


def _is_werkzeug_local_proxy(obj: Any) -> bool:
    proxy = _module_attr("werkzeug.local", "LocalProxy")
    return proxy is not None and isinstance(obj, proxy)


class _Hide(importlib.abc.MetaPathFinder):
    """Makes ``import name`` (and its submodules) fail as if ``name`` were not installed."""

    def __init__(self, names: frozenset[str]) -> None:
        self._names = names

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname.partition(".")[0] in self._names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)


def _pydantic_unused_by_providers() -> bool:
    if "pydantic" in sys.modules or importlib.util.find_spec("pydantic_settings") is not None:
        return False
    try:
        from importlib.metadata import PackageNotFoundError, version

        return not version("pydantic").startswith("1.")
    except (PackageNotFoundError, ValueError):
        return True


def import_dependency_injector() -> None:
    """Import ``dependency_injector.containers`` (and so its wiring) without importing the
    frameworks in ``_HIDDEN`` that the process has not imported itself. Idempotent."""
    if "dependency_injector.wiring" in sys.modules:
        return
    hidden = [name for name in _HIDDEN if name not in sys.modules]
    if _pydantic_unused_by_providers():
        hidden.append("pydantic")
    blocker = _Hide(frozenset(hidden))
    sys.meta_path.insert(0, blocker)
    try:
        import dependency_injector.containers  # noqa: F401 - imported for its side effect
        from dependency_injector import wiring
    finally:
        sys.meta_path.remove(blocker)
    extractors: list[Callable[[Any], Any]] = wiring.MARKER_EXTRACTORS
    filters: list[Callable[[Any], bool]] = wiring.INSPECT_EXCLUSION_FILTERS
    if "fastapi" in hidden:
        extractors.append(_fastapi_marker)
    if "fast_depends" in hidden:
        extractors.append(_fast_depends_marker)
    if "starlette" in hidden:
        filters.append(_is_starlette_request_class)
    if "werkzeug" in hidden:
        filters.append(_is_werkzeug_local_proxy)


import_dependency_injector()
