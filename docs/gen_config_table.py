"""Regenerate the key table of docs/configuration.md from the ``ratchet_core.runtime.config.KEYS``
registry. ``python docs/gen_config_table.py`` rewrites the table between the markers;
``--check`` exits 1 when the committed document is out of date."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from datetime import timedelta
from enum import Enum
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parent / "configuration.md"
BEGIN = "<!-- BEGIN GENERATED KEYS -->"
END = "<!-- END GENERATED KEYS -->"
SKIPPED_PACKAGES = ("ratchet_core.contrib",)
# Integration modules whose keys belong in the table and that import without their framework
# being configured.
INTEGRATION_KEY_MODULES = ("ratchet_core.contrib.django.conf",)


def collect_keys() -> dict[str, Any]:
    """Import every ratchet_core module (keys register themselves) and return the registry."""
    import ratchet_core
    from ratchet_core.runtime import config

    for module in pkgutil.walk_packages(ratchet_core.__path__, "ratchet_core."):
        if module.name.startswith(SKIPPED_PACKAGES):
            continue
        importlib.import_module(module.name)
    for name in INTEGRATION_KEY_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:  # the integration's extra is not installed
            continue
    return dict(sorted(config.KEYS.items()))


def _default(value: Any) -> str:
    if value is None or value in ({}, ()):
        return "(none)"
    if value == "":
        return "(empty)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return str(value.value).lower()
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        if seconds < 1:
            return f"{int(seconds * 1000)}ms"
        for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
            if seconds >= size and seconds % size == 0:
                return f"{seconds / size:g}{unit}"
        return f"{seconds:g}s"
    if isinstance(value, (tuple, list, frozenset, set)):
        return ",".join(str(v) for v in value)
    return str(value)


def render() -> str:
    from ratchet_core.runtime import config

    keys = collect_keys()
    lines = [
        BEGIN,
        "| key | environment variable | default | meaning |",
        "|---|---|---|---|",
    ]
    for key in keys.values():
        meaning = key.description.replace("|", "\\|").replace("\n", " ")
        env = f"`{key.environment_variable}`"
        aliases = config.ENV_ALIASES.get(key.name, ())
        if aliases:
            env += " (alias " + ", ".join(f"`{alias}`" for alias in aliases) + ")"
        lines.append(f"| `{key.name}` | {env} | `{_default(key.default)}` | {meaning} |")
    for pattern, meaning in sorted(config.PATTERN_KEYS.items()):
        env = "RATCHET_" + pattern.upper().replace(".", "_").replace("<TYPE>", "<TYPE>")
        lines.append(f"| `{pattern}` | `{env}` | (unset) | {meaning} |")
    lines.append(END)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    text = DOC.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    updated = text[:start] + render() + text[end:]
    if "--check" in argv:
        if updated != text:
            print(f"{DOC} is out of date: run python docs/gen_config_table.py")
            return 1
        return 0
    DOC.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
