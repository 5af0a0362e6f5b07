"""The ``JobInvocationResolver`` default (:class:`DefaultJobInvocationResolver`), implemented in
:mod:`ratchet_core.enqueue.invocation`: a callable and its arguments to a ``JobInvocation`` at
enqueue.

Every SPI default is importable as ``ratchet_core.defaults.<area>.<Name>`` (the table is in
``docs/overriding-an-spi.md``); this module names those whose code lives with the subsystem
that uses it."""

from __future__ import annotations

from ratchet_core.enqueue.invocation import DefaultJobInvocationResolver

__all__ = ["DefaultJobInvocationResolver"]
