from uuid import UUID

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from ratchet_core.contrib.django import enqueue, get_scheduler
from shop.jobs import count_orders, send_receipt
from shop.models import Order


@csrf_exempt
def create_order(request: HttpRequest) -> JsonResponse:
    with transaction.atomic():  # the order and its job commit (or roll back) together
        order = Order.objects.create(email=request.POST.get("email", "ada@example.com"))
        job_id = enqueue(send_receipt, order.pk)
        task = count_orders.enqueue()  # a Django task, also written in this transaction
    return JsonResponse(
        {"order_id": order.pk, "job": f"/jobs/{job_id}/", "task": f"/tasks/{task.id}/"},
        status=201,
    )


def show_job(request: HttpRequest, job_id: UUID) -> JsonResponse:
    result = get_scheduler().result(job_id)
    return JsonResponse({"status": str(result.status), "value": result.value})


def show_task(request: HttpRequest, result_id: str) -> JsonResponse:
    result = count_orders.get_result(result_id)
    value = result.return_value if result.is_finished and not result.errors else None
    return JsonResponse({"status": str(result.status), "return_value": value})
