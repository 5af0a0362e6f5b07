"""A plain Ratchet job and a Django Tasks @task."""

from django.db import close_old_connections
from django_tasks import task  # Django 6: from django.tasks import task


def send_receipt(order_id: int) -> str:
    from shop.models import Order

    try:
        order = Order.objects.get(pk=order_id)
        order.receipt_sent = True
        order.save(update_fields=["receipt_sent"])
        return f"receipt for order {order_id} sent to {order.email}"
    finally:
        close_old_connections()


@task()
def count_orders() -> int:
    from shop.models import Order

    return Order.objects.count()
