"""``tests.db_worker_test_settings`` of upstream's worker-process tests: the run's settings with
the test database (where the test process enqueued) as the ``default`` database."""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["UPSTREAM_TEST_DB"],
    }
}
