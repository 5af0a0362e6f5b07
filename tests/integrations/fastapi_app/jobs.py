from __future__ import annotations


def slugify(title: str) -> str:
    return "-".join(title.lower().split())
