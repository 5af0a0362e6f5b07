"""docs/errors.md documents every public error type of ratchet_api.errors."""

from __future__ import annotations

from pathlib import Path

import ratchet_api.errors as errors

DOC = Path(__file__).resolve().parents[2] / "docs" / "errors.md"


def test_every_public_error_has_a_row() -> None:
    text = DOC.read_text()
    missing = [name for name in errors.__all__ if f"| `{name}` |" not in text]
    assert not missing, f"docs/errors.md lacks rows for {missing}"
