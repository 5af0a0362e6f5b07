"""Cost of the default error sanitizer and of the sanitized traceback on hostile messages
(issue 26): 1 KB, 100 KB and 1 MB messages of several shapes, each the worst case of one of the
old patterns (a long run of word characters for the e-mail and URL patterns, ``x@`` repeated,
spaced digits for the card pattern, ``password=`` pairs). Also ``redact`` on the whole text
with no bound, which shows that every pattern is linear in the input (the sanitizer itself cuts
the message to 2,000 characters before matching, so its cost does not grow with the message).

Usage: .venv/bin/python benchmarks/bench_sanitizer.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from ratchet_core.defaults.security import DefaultErrorSanitizer, redact
from ratchet_core.worker.tracebacks import sanitized_traceback

SIZES = {"1 KB": 1_000, "100 KB": 100_000, "1 MB": 1_000_000}
SHAPES: dict[str, Callable[[int], str]] = {
    "word run": lambda n: "a" * n,
    "x@ repeated": lambda n: ("x@" * n)[:n],
    "spaced digits": lambda n: ("1 " * n)[:n],
    "password pairs": lambda n: ("password=hunter2 " * n)[:n],
    "mixed secrets": lambda n: (
        "postgresql://u:p@ss@db/x DB_PASSWORD=z AKIAIOSFODNN7EXAMPLE 4111 1111 1111 1111 "
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln sk_live_4eC39HqLyjWDarjtT1zdp7dc bob@x.io " * n
    )[:n],
}


def best(fn: Callable[[], object], repeat: int) -> float:
    """Median seconds of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sanitizer = DefaultErrorSanitizer()
    print("| message | size | sanitize (ms) | sanitized traceback (ms) | redact, unbounded (ms) |")
    print("|---|---:|---:|---:|---:|")
    for shape, make in SHAPES.items():
        for label, size in SIZES.items():
            text = make(size)
            error = RuntimeError(text)
            try:
                raise error
            except RuntimeError:
                pass
            sanitize = best(lambda e=error: sanitizer.sanitize(e), args.repeat)
            trace = best(lambda e=error: sanitized_traceback(e, sanitizer), args.repeat)
            whole = best(lambda t=text: redact(t, len(t) + 1), max(1, args.repeat // 2))
            print(
                f"| {shape} | {label} | {sanitize * 1000:.2f} | {trace * 1000:.2f} "
                f"| {whole * 1000:.1f} |"
            )


if __name__ == "__main__":
    main()
