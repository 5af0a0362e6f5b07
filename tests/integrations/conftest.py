"""Integration tests with the real frameworks. The Django tests run the project in
``tests/integrations/django_project`` through pytest-django: its settings module is set and
Django is set up here, when pytest collects this directory (pytest-django only sets Django up
itself when the settings are known at start-up)."""

from __future__ import annotations

import os

import django

_SET_HERE = "DJANGO_SETTINGS_MODULE" not in os.environ
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.integrations.django_project.settings")
django.setup()
if _SET_HERE:
    # Django is configured now (pytest-django sees ``settings.configured``); keep the variable
    # out of the environment that other tests' subprocesses (pytest runs, workers) inherit.
    del os.environ["DJANGO_SETTINGS_MODULE"]
