"""Example jobs used by ``ratchet demo`` (the quickstart). Each shows one behaviour: a plain
job, typed arguments restored from hints, retries with backoff, the dead letter, ``async def``.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal

import attrs

from ratchet_api import JobContext


@attrs.frozen(kw_only=True)
class Order:
    id: int
    item: str
    price: Decimal
    quantity: int = 1


def send_welcome_email(user: str) -> str:
    """Succeeds at once."""
    return f"welcome email sent to {user}"


def invoice_total(customer: str, orders: list[Order]) -> str:
    """Receives real ``Order`` instances (restored from the JSON payload by the type hint)."""
    total = sum((order.price * order.quantity for order in orders), Decimal(0))
    return f"invoice for {customer}: {len(orders)} orders, total {total}"


def sync_inventory(warehouse: str, ctx: JobContext) -> str:
    """Fails on its first two attempts (a flaky remote system), then succeeds."""
    ctx.logger.info(f"attempt {ctx.attempt} to sync {warehouse}")
    if ctx.attempt < 3:
        raise ConnectionError(f"warehouse {warehouse} did not answer (attempt {ctx.attempt})")
    return f"inventory of {warehouse} synchronised on attempt {ctx.attempt}"


def charge_card(card: str) -> None:
    """Always fails: after its retries it lands in the dead letter (status FAILED)."""
    raise PermissionError(f"card ending {card[-4:]} was declined")


async def fetch_exchange_rate(currency: str) -> str:
    """An ``async def`` job, run on the worker's event loop."""
    await asyncio.sleep(0.01)
    rates = {"EUR": "0.92", "GBP": "0.79", "JPY": "151.3"}
    return f"1 USD = {rates.get(currency, '?')} {currency}"
