"""No import circle inside ``ratchet_core``.

Every ``import`` statement of every module counts: at module level, under ``if TYPE_CHECKING:``
and inside functions. A type-only or deferred import still couples two modules (one cannot be
understood, moved or tested without the other), and a deferred import that closes a circle is
usually hiding one. ``from package import name`` is an edge to ``package.name`` when that is a
module, else to the package; the implicit import of a parent package's ``__init__`` is not an
edge (every module has it).

``KNOWN`` lists the circles that remain in modules other work owned while the enqueue pipeline
was built (issue 24), each with how it is to be cut; the test fails on any other circle and
when a listed one is gone (then delete it from the list).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "ratchet_core" / "src"
PACKAGE = ROOT / "ratchet_core"

KNOWN: dict[frozenset[str], str] = {
    frozenset(
        {
            "ratchet_core.contrib.django",
            "ratchet_core.contrib.django.apps",
            "ratchet_core.contrib.django.checks",
            "ratchet_core.contrib.django.migrate",
            "ratchet_core.contrib.django.submit",
        }
    ): "the package's __init__ re-exports from modules that import the package's container",
}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module of ``ratchet_core`` that ``name`` imports, wherever the statement is."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                prefix = package[: len(package) - (node.level - 1)]
                base = ".".join([*prefix, base] if base else prefix)
            for alias in node.names:
                child = f"{base}.{alias.name}"
                out.add(child if child in modules else base)
    return {m for m in out if m in modules and m != name}


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[frozenset[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        circles.append(frozenset(component))
    return circles


def test_no_import_circle_in_ratchet_core() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    circles = set(_circles(graph))
    new = [sorted(c) for c in circles - set(KNOWN)]
    assert not new, f"import circles in ratchet_core: {new}"
    gone = [sorted(c) for c in set(KNOWN) - circles]
    assert not gone, f"these circles are gone: delete them from KNOWN: {gone}"


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [frozenset({"a", "b", "c"})]
