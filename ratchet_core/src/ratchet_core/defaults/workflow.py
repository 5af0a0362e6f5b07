"""The ``PreExecutionArgResolver`` default (:class:`WorkflowArgResolver`): fills ``ParentResult``,
``ParentError`` and ``SignalPayload`` parameters of workflow steps
(:mod:`ratchet_core.features.workflow.args`).

Every SPI default is importable as ``ratchet_core.defaults.<area>.<Name>`` (the table is in
``docs/overriding-an-spi.md``); this module names those whose code lives with the subsystem
that uses it."""

from __future__ import annotations

from ratchet_core.features.workflow.args import WorkflowArgResolver

__all__ = ["WorkflowArgResolver"]
