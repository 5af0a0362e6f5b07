"""Settings of the worker-process tests (``manage.py ratchet_worker`` in a subprocess, as
Django's own ``db_worker`` process tests run it): only what a worker needs, the SQLite file of
``RATCHET_TEST_DJANGO_DB`` as the ``default`` database (and so as the store)."""

from __future__ import annotations

import os

SECRET_KEY = "ratchet-worker-process-tests"
DEBUG = False
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django_tasks",
    "ratchet_core.contrib.django",
    "tests.integrations.django_project.shop",
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["RATCHET_TEST_DJANGO_DB"],
    }
}

RATCHET = {
    "security": {"allowed_packages": "tests.integrations"},
    "worker": {"poll_interval": "20ms", "poll_max_interval": "200ms"},
}

TASKS = {
    "default": {
        "BACKEND": "ratchet_core.contrib.django.tasks.RatchetTaskBackend",
        "OPTIONS": {"MAX_RETRIES": 0},
    },
}
