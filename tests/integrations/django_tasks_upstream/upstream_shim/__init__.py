"""The ``db_worker`` shim's app (first in INSTALLED_APPS). As ``ratchet_core.contrib.django``
does for ``manage.py ratchet_worker``, a ``manage.py db_worker`` process gets the worker's
signal handlers as soon as Django imports the apps, not after ``django.setup()``."""

from __future__ import annotations

import sys

from ratchet_core.contrib.django.early import install_if_worker

if len(sys.argv) > 1 and sys.argv[1] == "db_worker":
    install_if_worker([sys.argv[0], "ratchet_worker"])
