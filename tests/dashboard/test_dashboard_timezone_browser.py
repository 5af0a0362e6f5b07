"""Timestamps on every dashboard page are ``<time datetime=ISO title="... UTC">`` elements shown
in the browser's time zone: a headless Chromium (the set-up of test_dashboard_browser) is put in
Asia/Kathmandu (UTC+05:45, an offset no machine's zone shares by chance) and each kind of page
is read, the job list and job page, the nodes and schedules lists (dashboard.js) and a schedule
page (operator.js)."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from ratchet_api.store.entities import NodeEntity
from tests.dashboard.server import Scene, dashboard_of, serve
from tests.dashboard.test_dashboard_browser import (  # the browser set-up and its helpers
    browser,
    loaded,
    scene,
)
from tests.engine import targets

# after the browser module's skip checks (selenium may be missing)
from selenium.webdriver.common.by import By  # isort: skip

__all__ = ["browser", "scene"]  # fixtures, imported for their tests

ZONE = "Asia/Kathmandu"
DUE = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
"""Shown as 2 January 2030, 08:49:05 in Kathmandu."""


def times(driver: Any, css: str) -> list[dict[str, str]]:
    return [
        {
            "datetime": t.get_attribute("datetime") or "",
            "title": t.get_attribute("title") or "",
            "text": t.text,
        }
        for t in driver.find_elements(By.CSS_SELECTOR, css)
    ]


def shown_at_kathmandu_time(stamp: dict[str, str]) -> None:
    """The element's text is its UTC instant at +05:45, in the browser's (en-US) form."""
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", stamp["title"]), stamp
    instant = datetime.fromisoformat(stamp["datetime"].replace("Z", "+00:00"))
    assert stamp["title"] == instant.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    local = instant.astimezone(ZoneInfo(ZONE))
    hour = local.hour % 12 or 12
    expected = f"{local.month}/{local.day}/{local.year}, {hour}:{local:%M:%S} " + (
        "AM" if local.hour < 12 else "PM"
    )
    assert stamp["text"] == expected, stamp


def test_times_are_local_with_utc_on_hover(scene: Scene, browser: Any) -> None:
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": ZONE})
    tag = f"tz-{uuid.uuid4().hex[:8]}"
    due_id = scene.container.scheduler().job(targets.add).args(1, 2).tags(tag).at(DUE).enqueue()
    name = f"tz-schedule-{uuid.uuid4().hex[:6]}"
    # next firing: 2 January 03:04 UTC of some year
    scene.container.scheduler().recurring_jobs.declare(name, "4 3 2 1 *", targets.add, 1, 2)
    node = f"tz-node-{uuid.uuid4().hex[:6]}"
    scene.store.upsert_heartbeat(NodeEntity(node_id=node, host="h", pid=1))
    with serve(dashboard_of(scene)) as base:
        browser.get(f"{base}#/jobs/{due_id}")
        loaded(browser, f"/jobs/{due_id}")
        assert (
            browser.execute_script("return Intl.DateTimeFormat().resolvedOptions().timeZone")
            in (ZONE, "Asia/Katmandu")  # ICU's canonical name is the older spelling
        )
        fields = times(browser, "#job-fields time")
        scheduled = [t for t in fields if t["title"] == "2030-01-02 03:04:05 UTC"]
        assert len(scheduled) == 1, fields
        assert scheduled[0]["datetime"] == "2030-01-02T03:04:05.000Z"
        assert scheduled[0]["text"] == "1/2/2030, 8:49:05 AM"
        for stamp in fields:  # created too
            shown_at_kathmandu_time(stamp)

        browser.get(f"{base}#/jobs?tag={tag}")
        loaded(browser, f"/jobs?tag={tag}")
        created = times(browser, "#jobs-table tr.job-row time")
        assert len(created) == 1  # created; not finished
        shown_at_kathmandu_time(created[0])

        browser.get(f"{base}#/jobs/{scene.ok_ids[0]}")
        loaded(browser, f"/jobs/{scene.ok_ids[0]}")
        executions = times(browser, "#executions time")
        logs = times(browser, "#job-logs time")
        assert executions
        for stamp in executions + logs:
            shown_at_kathmandu_time(stamp)

        browser.get(f"{base}#/nodes")
        loaded(browser, "/nodes")
        started = times(browser, f'#nodes-table tr[data-node="{node}"] time')
        assert len(started) == 1
        shown_at_kathmandu_time(started[0])

        browser.get(f"{base}#/recurring")
        loaded(browser, "/recurring")
        row = browser.find_element(
            By.XPATH, f'//table[@id="recurring-table"]//tr[td//text()="{name}"]'
        )
        listed = times(row, "time")
        assert listed and listed[0]["title"].endswith("-01-02 03:04:00 UTC"), listed
        for stamp in listed:
            shown_at_kathmandu_time(stamp)

        browser.get(f"{base}#/recurring/{name}")
        loaded(browser, f"/recurring/{name}")
        page = times(browser, "dl time")
        assert page[0]["title"].endswith("-01-02 03:04:00 UTC"), page
        assert page[0]["text"].startswith("1/2/") and page[0]["text"].endswith(", 8:49:00 AM")
        for stamp in page:
            shown_at_kathmandu_time(stamp)
