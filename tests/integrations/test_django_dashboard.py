"""The dashboard inside the Django project (``ratchet_core.contrib.django.urls``): staff users
see it, only superusers act, anonymous users are refused; built from the project's container."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from typing import Any

import attrs
import pytest
from django.core.management import call_command
from django.test import RequestFactory

from ratchet_api.model import JobStatus
from ratchet_core.contrib.django import get_container
from ratchet_core.contrib.django.urls import _view, dashboard, urlpatterns
from tests.engine.test_retention import backdated

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True, scope="module")
def _fresh_store() -> Iterator[None]:
    # another module may have closed the project's store (its teardown): open a new one
    container = get_container()
    for provider in (container.job_store, container.scheduler):
        provider.reset()
    _view.cache_clear()
    yield
    # pytest-django drops the test databases at the end: release the store's connections.
    get_container().job_store().close()


@attrs.define
class User:
    is_active: bool = True
    is_staff: bool = False
    is_superuser: bool = False


def get(path: str, user: Any) -> Any:
    request = RequestFactory().get("/admin/ratchet" + path)
    request.user = user
    return dashboard(request, path=path)


def post(path: str, user: Any) -> Any:
    request = RequestFactory().post("/admin/ratchet" + path, HTTP_X_RATCHET_DASHBOARD="1")
    request.user = user
    return dashboard(request, path=path)


def test_staff_see_superusers_act_others_are_refused() -> None:
    call_command("ratchet_migrate", stdout=StringIO())
    store = get_container().job_store()
    dead = backdated(store, JobStatus.FAILED, timedelta(hours=1), "dj")
    store.insert_job(dead)

    assert get("/api/overview", User(is_staff=False)).status_code == 403
    assert get("/api/overview", User(is_staff=True, is_active=False)).status_code == 403
    staff = User(is_staff=True)
    page = get("/", staff)
    assert page.status_code == 200 and b"dashboard.js" in page.content
    detail = json.loads(get(f"/api/jobs/{dead.id}", staff).content)
    assert detail["status"] == "FAILED"

    refused = post(f"/api/jobs/{dead.id}/retry", staff)
    assert refused.status_code == 403
    assert store.find_by_id(dead.id).status is JobStatus.FAILED
    done = post(f"/api/jobs/{dead.id}/retry", User(is_staff=True, is_superuser=True))
    assert done.status_code == 200, done.content
    assert store.find_by_id(dead.id).status is JobStatus.PENDING
    assert len(urlpatterns) == 1
