from __future__ import annotations

import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from ratchet_core.contrib.django import database_alias, enqueue
from tests.integrations.django_project.shop.jobs import multiply, process_order
from tests.integrations.django_project.shop.models import Order


class _Abort(Exception):
    pass


@csrf_exempt
def create_order(request: HttpRequest) -> JsonResponse:
    """Creates an order and enqueues its processing in one transaction; ``fail=1`` makes the
    view fail after the enqueue, inside the transaction."""
    alias = database_alias()
    job_id = None
    try:
        with transaction.atomic(using=alias):
            order = Order.objects.using(alias).create(item=request.POST["item"])
            job_id = enqueue(process_order, order.pk, alias)
            if request.POST.get("fail"):
                raise _Abort
    except _Abort:
        return JsonResponse({"job_id": str(job_id), "rolled_back": True}, status=409)
    return JsonResponse({"job_id": str(job_id), "order_id": order.pk}, status=201)


@csrf_exempt
def enqueue_task(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body)
    result = multiply.enqueue(body["a"], body["b"])
    return JsonResponse({"result_id": result.id, "status": str(result.status)}, status=202)
