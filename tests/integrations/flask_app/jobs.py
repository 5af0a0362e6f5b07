from __future__ import annotations


def shout(text: str) -> str:
    return text.upper() + "!"
