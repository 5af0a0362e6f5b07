"""Running django-tasks-db's own test suite (from its sdist) against Ratchet's Django Tasks
backend: the files the runner (tests/integrations/test_django_tasks_upstream.py) puts next to
upstream's ``tests/tests.py``."""
