"""Regenerate the store-method table of docs/tck.md (section 7) from ``ratchet_api.store``'s
protocols: one row per method with its signature, the contract class that certifies it and the
first paragraph of its docstring. ``python docs/gen_store_method_table.py`` rewrites the rows."""

from __future__ import annotations

import inspect
from pathlib import Path

from ratchet_api.store import protocols
from ratchet_tck import ALL_CONTRACTS

DOC = Path(__file__).resolve().parent / "tck.md"
HEADER = "| protocol | method | contract | contract text (the protocol's docstring) |\n|---|---|---|---|\n"


def _signature(member: object) -> str:
    sig = inspect.signature(member)  # type: ignore[arg-type]
    params = [p for p in sig.parameters.values() if p.name != "self"]
    text = f"({', '.join(str(p) for p in params)})"
    if sig.return_annotation is not inspect.Signature.empty:
        text += f" -> {sig.return_annotation}"
    return text.replace("'", "").replace("|", "\\|")


def _doc(member: object) -> str:
    doc = inspect.getdoc(member) or ""
    first = doc.split("\n\n")[0]
    return " ".join(first.split()).replace("|", "\\|").replace("``", "`")


def rows() -> str:
    contracts = {c.__name__ for c in ALL_CONTRACTS}
    mandatory = [k for k in protocols.JobStore.__mro__ if k.__module__ == protocols.__name__]
    kinds = [(k, False) for k in mandatory]
    kinds += [(k, True) for k in protocols.CAPABILITIES]
    out = []
    for kind, capability in kinds:
        contract = f"{kind.__name__}Contract"
        if kind is protocols.JobStore:
            contract = (
                "JobStoreJoinedContract"  # joined(); capability() and close() are used by all
            )
        contract = contract if contract in contracts else "(none)"
        label = f"`{kind.__name__}`" + (" (capability)" if capability else "")
        for name, member in vars(kind).items():
            if callable(member) and not name.startswith("_"):
                out.append(
                    f"| {label} | `{name}{_signature(member)}` | {contract} | {_doc(member)} |\n"
                )
    return "".join(out)


def main() -> None:
    text = DOC.read_text()
    start = text.index(HEADER) + len(HEADER)
    end = start
    lines = text[start:].splitlines(keepends=True)
    for line in lines:
        if not line.startswith("| `"):
            break
        end += len(line)
    DOC.write_text(text[:start] + rows() + text[end:])


if __name__ == "__main__":
    main()
