"""Settings of upstream's suite run against Ratchet (``tests.settings`` in the run folder):
a SQLite file (``UPSTREAM_DB``) is the Django database, its test database
(``UPSTREAM_TEST_DB``) the store the worker processes share; ``TASKS`` names Ratchet's backend."""

from __future__ import annotations

import os

SECRET_KEY = "ratchet-upstream-suite"
DEBUG = False
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROOT_URLCONF: list[object] = []
TEST_RUNNER = "upstream_shim.runner.Runner"  # also empties Ratchet's tables between tests

INSTALLED_APPS = [
    "upstream_shim",  # before django_tasks_db: its db_worker is ratchet_worker
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_tasks",
    "django_tasks_db",
    "ratchet_core.contrib.django",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["UPSTREAM_DB"],
        "TEST": {"NAME": os.environ["UPSTREAM_TEST_DB"]},
    }
}

RATCHET = {
    "security": {"allowed_packages": "tests"},
    "worker": {"poll_interval": "20ms", "poll_max_interval": "200ms"},
}

TASKS = {
    "default": {
        "BACKEND": "ratchet_core.contrib.django.tasks.RatchetTaskBackend",
        "QUEUES": ["default", "queue-1"],
    },
}
