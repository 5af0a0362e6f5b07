"""A view receiving the scheduler by dependency-injector wiring."""

from __future__ import annotations

from dependency_injector.wiring import Provide, inject
from flask import jsonify
from flask.typing import ResponseReturnValue

from ratchet_core.enqueue.scheduler import SchedulerService
from tests.integrations.flask_app.containers import AppContainer
from tests.integrations.flask_app.jobs import shout


@inject
def enqueue_with_injected_scheduler(
    scheduler: SchedulerService = Provide[AppContainer.ratchet.scheduler],
) -> ResponseReturnValue:
    return jsonify(job_id=str(scheduler.enqueue(shout, "injected"))), 201
