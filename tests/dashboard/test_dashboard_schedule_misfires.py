"""A schedule's misfires on the dashboard (features/recurring/history.py): a definition whose
due time passed while no scheduler ran is swept by a real sweeper; the schedules API and list
count its misfire, and the schedule page (headless Chromium, the set-up of
test_dashboard_browser) shows the skipped round among the recent firings."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from ratchet_core.features.recurring.settings import RecurringSettings
from ratchet_core.features.recurring.sweeper import RecurringSweeper
from tests.dashboard.server import Scene, call, dashboard_of, serve
from tests.dashboard.test_dashboard_browser import (  # the browser set-up and its helpers
    browser,
    loaded,
    scene,
    snap,
)
from tests.engine import targets
from tests.recurring.test_recurring_store import backdate

# after the browser module's skip checks (selenium may be missing)
from selenium.webdriver.common.by import By  # isort: skip

__all__ = ["browser", "scene"]  # fixtures, imported for their tests


def test_a_skipped_round_and_a_late_firing_are_shown(scene: Scene, browser: Any) -> None:
    service = scene.container.scheduler().recurring_jobs
    skipped = f"tz-skip-{uuid.uuid4().hex[:6]}"
    late = f"tz-late-{uuid.uuid4().hex[:6]}"
    service.declare(skipped, timedelta(hours=1), targets.add, 1, 2, misfire="skip")
    service.declare(late, timedelta(hours=1), targets.add, 1, 2, misfire="fire_once")
    backdate(scene.store, skipped, timedelta(hours=3, minutes=30))
    backdate(scene.store, late, timedelta(hours=3, minutes=30))
    RecurringSweeper(scene.store, RecurringSettings()).sweep()
    with serve(dashboard_of(scene)) as base:
        _, listed = call(base, "api/recurring")
        counts = {s["name"]: s["misfires"] for s in listed["schedules"]}
        assert counts[skipped] == 1 and counts[late] == 1
        _, detail = call(base, f"api/recurring/{late}")
        [firing] = detail["firings"]
        assert firing["misfire"] and firing["missed"] == 3 and firing["status"] == "PENDING"
        assert firing["late_seconds"] > 3 * 3600

        browser.get(f"{base}#/recurring")
        loaded(browser, "/recurring")
        row = browser.find_element(
            By.XPATH, f'//table[@id="recurring-table"]//tr[td//text()="{skipped}"]'
        )
        assert row.find_element(By.CSS_SELECTOR, "td.misfires").text == "1"

        browser.get(f"{base}#/recurring/{skipped}")
        loaded(browser, f"/recurring/{skipped}")
        assert browser.find_element(By.ID, "schedule-misfires").text == "1"
        [shown] = browser.find_elements(By.CSS_SELECTOR, "#firings-table tr.misfire")
        assert shown.find_element(By.CSS_SELECTOR, ".misfire-note").text == (
            "skipped 4 slot(s) (SKIP)"
        )
        snap(browser, "schedule-misfires")

        browser.get(f"{base}#/recurring/{late}")
        loaded(browser, f"/recurring/{late}")
        note = browser.find_element(By.CSS_SELECTOR, "#firings-table tr.misfire .misfire-note")
        assert note.text.startswith("late by ") and note.text.endswith(
            " h, 3 slot(s) without a job (FIRE_ONCE)"
        )
