"""Job targets of the example (importable functions; listed in RATCHET_SECURITY_ALLOWED_PACKAGES)."""

from __future__ import annotations

import time


def send_receipt(order_id: int, email: str) -> str:
    time.sleep(0.2)  # pretend to talk to a mail server
    return f"receipt for order {order_id} sent to {email}"
