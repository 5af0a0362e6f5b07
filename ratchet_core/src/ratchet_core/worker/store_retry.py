"""The worker's one retry helper for transient store errors.

Every outcome write of the worker goes through :func:`retry_transient`, called by the
completer (``completion.py``): up to ``tries`` calls, with exponential backoff between them, as
long as the error is transient; a write that still fails goes back to the completer's queue.
(Claims are guarded by the poller's breaker instead.) What is transient is the store's to say: by default a ``StoreError``
whose ``retryable`` is true (``TransientStoreError``); a store may offer its own predicate as
``is_transient(exc)`` (see :func:`transient_predicate`). A store must not retry the same
operation itself as well: nested retries multiply the statements one failure can cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from ratchet_core.observability.logs import is_transient

T = TypeVar("T")

Predicate = Callable[[BaseException], bool]

DEFAULT_TRIES = 4
FIRST_DELAY = 0.05
MAX_DELAY = 2.0


def transient_predicate(store: Any) -> Predicate:
    """The store's ``is_transient(exc)`` when it offers one, else ``StoreError.retryable``."""
    own = getattr(store, "is_transient", None)
    if callable(own):

        def either(exc: BaseException) -> bool:
            return bool(own(exc)) or is_transient(exc)

        return either
    return is_transient


def retry_transient(
    call: Callable[[], T],
    *,
    is_retryable: Predicate = is_transient,
    tries: int = DEFAULT_TRIES,
    on_retry: Callable[[int, BaseException], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, called again (at most ``tries`` calls in all) while it raises an error that
    ``is_retryable`` accepts; ``on_retry(attempt, error)`` runs before each new call. Raises the
    last error (or the first one that is not retryable)."""
    delay = FIRST_DELAY
    for attempt in range(1, tries + 1):
        try:
            return call()
        except Exception as exc:
            if attempt == tries or not is_retryable(exc):
                raise
            if on_retry is not None:
                on_retry(attempt, exc)
        sleep(delay)
        delay = min(delay * 2, MAX_DELAY)
    raise AssertionError("unreachable")  # pragma: no cover


__all__ = ["DEFAULT_TRIES", "Predicate", "retry_transient", "transient_predicate"]
