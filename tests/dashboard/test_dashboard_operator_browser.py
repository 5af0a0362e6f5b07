"""The operator pages (issue 28) in a real headless Chromium (the set-up of
test_dashboard_browser): a bulk retry of a filtered set of 500 failed jobs with its count and
confirmation, the ``permission`` hook refusing a bulk action, a batch's progress updating itself
while the batch runs (live refresh), the graph of a ``then`` + ``branch`` workflow, sending a
signal, the queues page, a schedule triggered now, and dark mode.

With ``RATCHET_DASHBOARD_SCREENSHOTS=<folder>`` each page is saved there as a PNG
(docs/images/dashboard/regenerate.sh makes them so)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from ratchet_api.model import JobStatus
from ratchet_api.workflow import Step, equals
from tests.dashboard.server import Scene, dashboard_of, serve
from tests.dashboard.test_dashboard_browser import (  # the browser set-up and its helpers
    browser,
    loaded,
    scene,
    snap,
    wait,
)
from tests.dashboard.test_dashboard_operator import failed_jobs, run_until
from tests.engine import targets
from tests.engine import workflow_targets as wt
from tests.engine.batch_targets import callback, child

# after the browser module's skip checks (selenium may be missing)
from selenium.webdriver.common.by import By  # isort: skip
from selenium.webdriver.support import expected_conditions as ec  # isort: skip
from selenium.webdriver.support.ui import Select  # isort: skip

__all__ = ["browser", "scene"]  # fixtures, imported for their tests


def message(driver: Any, text: str) -> None:
    wait(driver, ec.text_to_be_present_in_element((By.ID, "message"), text))


def test_bulk_retry_of_500_filtered_failed_jobs(scene: Scene, browser: Any) -> None:
    tag = f"bulk-{uuid.uuid4().hex[:8]}"
    ids = failed_jobs(scene, 500, tag)
    with serve(dashboard_of(scene)) as base:
        browser.get(f"{base}#/jobs?status=FAILED&tag={tag}")
        loaded(browser, f"/jobs?status=FAILED&tag={tag}")
        assert "500 job(s)" in browser.find_element(By.ID, "jobs-total").text
        Select(browser.find_element(By.ID, "bulk-action")).select_by_value("retry")
        Select(browser.find_element(By.ID, "bulk-scope")).select_by_value("filter")
        snap(browser, "bulk-select")
        browser.find_element(By.ID, "bulk-run").click()
        confirm = wait(browser, ec.alert_is_present())
        assert confirm.text == "retry 500 job(s)?"
        confirm.accept()
        message(browser, "retry: 500 changed, 0 skipped")
        snap(browser, "bulk-done")
    retried = [scene.store.find_by_id(i) for i in ids]
    assert all(j is not None and j.status is JobStatus.PENDING for j in retried)


def test_the_permission_hook_refuses_a_bulk_delete(scene: Scene, browser: Any) -> None:
    def no_deletes(action: str, subject: str, environ: dict[str, Any]) -> bool:
        return action != "delete"

    with serve(dashboard_of(scene, permission=no_deletes)) as base:
        browser.get(f"{base}#/jobs?tag={scene.tag}")
        loaded(browser, f"/jobs?tag={scene.tag}")
        box = browser.find_element(By.CSS_SELECTOR, f'.select-job[value="{scene.dead_id}"]')
        box.click()
        Select(browser.find_element(By.ID, "bulk-action")).select_by_value("delete")
        browser.find_element(By.ID, "bulk-run").click()
        confirm = wait(browser, ec.alert_is_present())
        assert confirm.text == "delete 1 job(s)?"
        confirm.accept()
        message(browser, "not permitted to delete")
        assert "error" in browser.find_element(By.ID, "message").get_attribute("class")
    assert scene.store.find_by_id(scene.dead_id) is not None


def test_a_batch_page_follows_the_batch_while_it_runs(
    scene: Scene, browser: Any, tmp_path: Any
) -> None:
    batch = scene.container.scheduler().batch("browser-batch")
    batch.add_many(child, [(str(tmp_path / "log"), i) for i in range(6)])
    batch.on_complete(callback, str(tmp_path / "log"), "complete")
    batch_id = batch.enqueue()
    with serve(dashboard_of(scene)) as base:
        browser.get(f"{base}#/batches")
        loaded(browser, "/batches")
        browser.find_element(By.CSS_SELECTOR, f'tr[data-id="{batch_id}"] a').click()
        loaded(browser, f"/batches/{batch_id}")
        pending = '[data-count="pending"] .value'
        assert browser.find_element(By.CSS_SELECTOR, pending).text == "6"
        assert len(browser.find_elements(By.CSS_SELECTOR, "#batch-children tr.job-row")) == 6
        browser.find_element(By.ID, "live-toggle").click()  # the page refreshes itself
        store = scene.container.job_store()

        def complete() -> bool:
            found = store.find_batch(batch_id)
            return found is not None and found.pending == 0

        worker = threading.Thread(target=run_until, args=(scene, "the batch", complete))
        worker.start()
        try:
            wait(
                browser,
                lambda d: d.find_element(By.CSS_SELECTOR, pending).text == "0",
                timeout=60,
            )
        finally:
            worker.join(60)
        assert browser.find_element(By.CSS_SELECTOR, ".progress").get_attribute("data-percent") in (
            "100",
            "100.0",
        )
        snap(browser, "batch")
        Select(browser.find_element(By.ID, "batch-status-filter")).select_by_value("SUCCEEDED")
        loaded(browser, f"/batches/{batch_id}?status=SUCCEEDED")  # the filter is in the URL
        browser.find_element(By.ID, "live-toggle").click()


def test_the_graph_of_a_then_and_branch_workflow(scene: Scene, browser: Any) -> None:
    builder = scene.container.scheduler().job(wt.double).args(5).then(wt.add_one)
    builder.branch(equals(11), if_true=Step(wt.label, "eleven"), if_false=Step(wt.label, "no"))
    builder.enqueue()
    root, step, yes, no = builder.job_ids

    def settled() -> bool:
        jobs = [scene.store.find_by_id(i) for i in (yes, no)]
        done = (JobStatus.SUCCEEDED, JobStatus.CANCELLED, JobStatus.FAILED)
        return all(j is not None and j.status in done for j in jobs)

    run_until(scene, "the workflow", settled)
    with serve(dashboard_of(scene)) as base:
        browser.get(f"{base}#/jobs/{step}")
        loaded(browser, f"/jobs/{step}")
        browser.find_element(By.ID, "workflow-link").click()
        loaded(browser, f"/workflow/{step}")
        nodes = browser.find_elements(By.CSS_SELECTOR, "#workflow-graph .wf-node")
        status = {n.get_attribute("data-id"): n.get_attribute("data-status") for n in nodes}
        assert status == {
            str(root): "SUCCEEDED",
            str(step): "SUCCEEDED",
            str(yes): "SUCCEEDED",
            str(no): "CANCELLED",
        }
        skipped = browser.find_element(By.CSS_SELECTOR, f'line[data-to="{no}"]')
        assert "edge-not-taken" in skipped.get_attribute("class")
        snap(browser, "workflow")


def test_sending_a_signal_from_the_page(scene: Scene, browser: Any) -> None:
    key = f"approval-{uuid.uuid4().hex[:8]}"
    scheduler = scene.container.scheduler()
    waiting = scheduler.job(wt.approve).kwargs(order=9).await_signal(key, timeout=600).enqueue()
    with serve(dashboard_of(scene)) as base:
        browser.get(base)
        loaded(browser, "/")
        browser.find_element(By.ID, "nav-signals").click()
        loaded(browser, "/signals")
        row = browser.find_element(By.CSS_SELECTOR, f'tr[data-id="{waiting}"]')
        assert key in row.text
        snap(browser, "signals")
        browser.find_element(By.ID, "signal-target").send_keys(key)
        browser.find_element(By.ID, "signal-payload").send_keys('{"by": "ann"}')
        browser.find_element(By.ID, "send-signal").click()
        message(browser, "DELIVERED")
        wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, f'tr[data-id="{waiting}"]'))
    job = scene.store.find_by_id(waiting)
    assert job is not None and job.status is JobStatus.PENDING


def test_queues_schedule_trigger_and_dark_mode(scene: Scene, browser: Any) -> None:
    name = f"browser-nightly-{uuid.uuid4().hex[:6]}"
    scene.container.scheduler().recurring_jobs.declare(name, "0 3 * * *", targets.add, 1, 2)
    with serve(dashboard_of(scene)) as base:
        browser.get(f"{base}#/queues")
        loaded(browser, "/queues")
        names = [
            r.get_attribute("data-name")
            for r in browser.find_elements(By.CSS_SELECTOR, "#targets-table tr.queue-row")
        ]
        assert "tests.engine.targets:flaky" in names
        snap(browser, "queues")
        browser.find_element(By.ID, "nav-recurring").click()
        loaded(browser, "/recurring")
        browser.find_element(By.LINK_TEXT, name).click()
        loaded(browser, f"/recurring/{name}")
        browser.find_element(By.ID, "schedule-trigger").click()
        message(browser, "triggered: job")
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#firings-table a.job-link"))
        browser.find_element(By.ID, "schedule-pause").click()
        wait(browser, lambda d: d.find_element(By.ID, "schedule-state").text == "paused")
        snap(browser, "schedule")
        theme = "return document.documentElement.dataset.theme"
        before = browser.execute_script(theme)
        browser.find_element(By.ID, "theme-toggle").click()
        after = browser.execute_script(theme)
        assert {before, after} == {"light", "dark"}
        if after == "light":
            browser.find_element(By.ID, "theme-toggle").click()
        browser.find_element(By.ID, "nav-overview").click()
        loaded(browser, "/")
        snap(browser, "overview-dark")
        browser.refresh()
        loaded(browser, "/")
        assert browser.execute_script(theme) == "dark"  # kept for the next visit
