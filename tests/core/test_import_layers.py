"""No import circles between the container and the alternatives registry, nor between the
builder and the scheduler (issue 15): the lower module never imports the higher one at run time
(imports for type checking only are allowed)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest


def runtime_imports(module: str) -> set[str]:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("ratchet_core.runtime.alternatives", "ratchet_core.runtime.container"),
        ("ratchet_core.runtime.bindings", "ratchet_core.runtime.container"),
        ("ratchet_core.runtime.bindings", "ratchet_core.runtime.alternatives"),
        ("ratchet_core.enqueue.builder", "ratchet_core.enqueue.scheduler"),
    ],
)
def test_no_runtime_import_of_the_higher_module(module: str, forbidden: str) -> None:
    assert forbidden not in runtime_imports(module)
