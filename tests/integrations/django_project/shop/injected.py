"""A view that receives the scheduler from the project container (``RATCHET_WIRE``)."""

from __future__ import annotations

from dependency_injector.wiring import Provide, inject
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from ratchet_api.scheduler import JobScheduler
from tests.integrations.django_project.containers import ProjectContainer
from tests.integrations.django_project.shop.jobs import greet


@csrf_exempt
@inject
def greet_view(
    request: HttpRequest,
    scheduler: JobScheduler = Provide[ProjectContainer.ratchet.scheduler],
) -> JsonResponse:
    job_id = scheduler.job(greet).args(request.POST["name"]).enqueue()
    return JsonResponse({"job_id": str(job_id)}, status=201)
