"""Integration tests with the real frameworks. The Django tests run the project in
``tests/integrations/django_project`` through pytest-django: its settings module is set and
Django is set up here, when pytest collects this directory (pytest-django only sets Django up
itself when the settings are known at start-up)."""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.integrations.django_project.settings")
django.setup()
