"""Settings of the Django project the integration tests run (pytest-django).

Two databases: ``default`` (SQLite, a file so that a worker can share it) and, when the
PostgreSQL test server answers, ``pg``. Tests switch the store between them with
``override_settings(RATCHET={... "django": {"database": "pg"}})``; pytest-django creates and
drops ``test_<NAME>`` on each.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tests import servers

_TMP = Path(tempfile.mkdtemp(prefix="ratchet-django-"))

SECRET_KEY = "ratchet-integration-tests"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost"]
USE_TZ = True
ROOT_URLCONF = "tests.integrations.django_project.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django_tasks",
    "ratchet_core.contrib.django",
    "tests.integrations.django_project.shop",
]

DATABASES: dict[str, dict[str, object]] = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(_TMP / "project.sqlite3"),
        "TEST": {"NAME": str(_TMP / "test_project.sqlite3")},
    }
}
PG_AVAILABLE = servers.port_open(servers.PG_HOST, servers.PG_PORT)
if PG_AVAILABLE:
    DATABASES["pg"] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": f"ratchet_django_{servers.SESSION_SUFFIX}",
        "USER": "postgres",
        "HOST": servers.PG_HOST,
        "PORT": servers.PG_PORT,
    }

RATCHET = {
    "security": {"allowed_packages": "tests.integrations"},
    "worker": {"poll_interval": "20ms", "poll_max_interval": "200ms"},
}
RATCHET_CONTAINER = "tests.integrations.django_project.containers.create_container"
RATCHET_WIRE = ["tests.integrations.django_project.shop.injected"]

TASKS = {
    "default": {
        "BACKEND": "ratchet_core.contrib.django.tasks.RatchetTaskBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"MAX_RETRIES": 0},
    },
    "retrying": {
        "BACKEND": "ratchet_core.contrib.django.tasks.RatchetTaskBackend",
        "OPTIONS": {"MAX_RETRIES": 1},
    },
    # Django's own reference backend, to compare behaviour against.
    "immediate": {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"},
}
