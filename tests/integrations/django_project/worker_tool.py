"""``python -m tests.integrations.django_project.worker_tool TASK [JSON_ARGS]``: enqueue a task
of the test project's ``shop.jobs`` through Django's Tasks API and print the result id (the
worker-process tests run it with ``worker_settings``)."""

from __future__ import annotations

import json
import sys

import django


def main(argv: list[str]) -> None:
    django.setup()
    from tests.integrations.django_project.shop import jobs

    task = getattr(jobs, argv[0])
    args = json.loads(argv[1]) if len(argv) > 1 else []
    print(task.enqueue(*args).id)


if __name__ == "__main__":
    main(sys.argv[1:])
