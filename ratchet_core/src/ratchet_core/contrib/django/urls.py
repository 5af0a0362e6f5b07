"""The Ratchet dashboard inside a Django project, behind Django's own login: include it next to
the admin::

    urlpatterns = [
        path("admin/ratchet", include("ratchet_core.contrib.django.urls")),
        path("admin/", admin.site.urls),
    ]

Active staff users see the dashboard; superusers may also retry, cancel, pause, resume and
delete jobs (others get 403). Anonymous users are sent to the admin login (403 without the
admin). The dashboard is built from the project's Ratchet container on first use.
``dashboard.read_only`` applies as everywhere.
"""

from __future__ import annotations

import functools
from typing import Any
from urllib.parse import urlencode

from django.http import HttpResponseForbidden, HttpResponseRedirect
from django.urls import NoReverseMatch, re_path, reverse

from ratchet_core.dashboard import DJANGO_REQUEST_KEY, create_dashboard, django_view


def superuser_actions(action: str, job_id: str, environ: dict[str, Any]) -> bool:
    """The default permission hook: actions are for active superusers."""
    user = getattr(environ.get(DJANGO_REQUEST_KEY), "user", None)
    return bool(user is not None and user.is_active and user.is_superuser)


@functools.cache
def _view() -> Any:
    from ratchet_core.contrib.django import get_container

    return django_view(create_dashboard(get_container(), permission=superuser_actions))


def dashboard(request: Any, path: str | None = None) -> Any:
    """The dashboard for active staff users."""
    user = getattr(request, "user", None)
    if user is None or not (user.is_active and user.is_staff):
        try:
            login = reverse("admin:login")
        except NoReverseMatch:
            return HttpResponseForbidden("the Ratchet dashboard is for staff users")
        return HttpResponseRedirect(f"{login}?{urlencode({'next': request.get_full_path()})}")
    return _view()(request, path=path)


urlpatterns = [re_path(r"^(?P<path>/.*)?$", dashboard, name="ratchet-dashboard")]
