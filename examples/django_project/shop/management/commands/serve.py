"""`manage.py serve`: migrate, then the development server plus a Ratchet worker thread
(for trying the example; in production run `manage.py ratchet_worker` as its own process)."""

import threading
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand

from ratchet_core.contrib.django import get_container


class Command(BaseCommand):
    help = "migrate + runserver with an in-process Ratchet worker"

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", verbosity=0)  # also creates Ratchet's tables
        worker = get_container().worker()
        threading.Thread(
            target=worker.run_forever, kwargs={"install_signal_handlers": False}, daemon=True
        ).start()
        call_command("runserver", "127.0.0.1:8000", use_reloader=False)
