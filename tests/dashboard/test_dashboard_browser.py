"""The dashboard in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
driven by Selenium with the system driver: nothing is downloaded): load the overview, filter
the job list, open a job, retry a dead-lettered job and see its status change.

With ``RATCHET_DASHBOARD_SCREENSHOTS=<folder>`` each page is saved there as a PNG (how the
screenshots in docs/images/dashboard were made)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ratchet_api.model import JobStatus
from ratchet_api.store.entities import NodeEntity
from tests.dashboard.server import Scene, dashboard_of, make_scene, serve

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,900",
)

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
if os.environ.get("CI") != "true" and not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip(
        "Debian's chromium and chromium-driver are not installed "
        "(apt-get install -y chromium chromium-driver)",
        allow_module_level=True,
    )

from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'profile'}")
    service = webdriver.ChromeService(executable_path=str(CHROMEDRIVER))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def scene(sqlite_url: str) -> Iterator[Scene]:
    scene = make_scene(sqlite_url)
    yield scene
    scene.container.shutdown_resources()
    scene.store.close()


def wait(driver: Any, condition: Any, timeout: float = 20) -> Any:
    # the page re-renders: an element read a moment ago may be replaced
    return WebDriverWait(
        driver, timeout, ignored_exceptions=(StaleElementReferenceException,)
    ).until(condition)


def loaded(driver: Any, route: str) -> None:
    """Wait until the page says it rendered ``route`` (dashboard.js sets data-loaded)."""
    wait(
        driver, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == route
    )


def snap(driver: Any, name: str) -> None:
    folder = os.environ.get("RATCHET_DASHBOARD_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(folder) / f"{name}.png"))


def test_overview_filter_open_and_retry_a_dead_letter(scene: Scene, browser: Any) -> None:
    with serve(dashboard_of(scene)) as base:
        browser.get(base)
        loaded(browser, "/")
        failed_card = browser.find_element(By.CSS_SELECTOR, '[data-count-status="FAILED"] .value')
        assert failed_card.text == "1"
        succeeded = browser.find_element(By.CSS_SELECTOR, '[data-count-status="SUCCEEDED"] .value')
        assert succeeded.text == "4"
        assert browser.find_element(By.ID, "throughput-chart").is_displayed()
        snap(browser, "overview")

        browser.find_element(By.ID, "nav-jobs").click()
        loaded(browser, "/jobs")
        rows = browser.find_elements(By.CSS_SELECTOR, "#jobs-table tr.job-row")
        assert len(rows) == 5
        Select(browser.find_element(By.ID, "status-filter")).select_by_value("FAILED")
        browser.find_element(By.ID, "tag-filter").send_keys(scene.tag)
        browser.find_element(By.ID, "apply-filters").click()
        loaded(browser, f"/jobs?status=FAILED&tag={scene.tag}")
        rows = browser.find_elements(By.CSS_SELECTOR, "#jobs-table tr.job-row")
        assert [r.get_attribute("data-id") for r in rows] == [str(scene.dead_id)]
        assert "1 job(s)" in browser.find_element(By.ID, "jobs-total").text
        snap(browser, "jobs-filtered")

        rows[0].click()
        loaded(browser, f"/jobs/{scene.dead_id}")
        status = browser.find_element(By.CSS_SELECTOR, "#job-status .status")
        assert status.get_attribute("data-status") == "FAILED"
        assert "transient failure" in browser.find_element(By.ID, "job-error").text
        fields = browser.find_element(By.ID, "job-fields").text
        assert "tests.engine.targets:flaky" in fields and "HTMLElement" not in fields
        assert "FAILED" in browser.find_element(By.ID, "executions").text
        snap(browser, "job-failed")

        browser.find_element(By.ID, "action-retry").click()
        wait(browser, ec.text_to_be_present_in_element((By.ID, "message"), "retry done"))
        wait(
            browser,
            lambda d: (
                d.find_element(By.CSS_SELECTOR, "#job-status .status").get_attribute("data-status")
                == "PENDING"
            ),
        )
        job = scene.store.find_by_id(scene.dead_id)
        assert job is not None and job.status is JobStatus.PENDING

        # a worker runs it again (flaky succeeds on its second call): reload shows the result
        scene.run_worker()
        browser.refresh()
        loaded(browser, f"/jobs/{scene.dead_id}")
        status = browser.find_element(By.CSS_SELECTOR, "#job-status .status")
        assert status.get_attribute("data-status") == "SUCCEEDED"
        assert "ok after 2" in browser.find_element(By.ID, "job-result").text
        snap(browser, "job-retried")


def test_masked_arguments_and_nodes_page(scene: Scene, browser: Any) -> None:
    # a worker that stops cleanly removes its node row: a live node is one heartbeating now
    scene.store.upsert_heartbeat(NodeEntity(node_id="dash-browser-node", host="h", pid=1))
    with serve(dashboard_of(scene, read_only=True)) as base:
        browser.get(f"{base}#/jobs/{scene.secret_id}")
        loaded(browser, f"/jobs/{scene.secret_id}")
        args = browser.find_element(By.ID, "job-args").text
        assert "ada" in args and "hunter2" not in args and "••••••" in args
        assert browser.find_elements(By.ID, "action-retry") == []  # read-only: no buttons
        assert browser.find_element(By.ID, "mode").text == "read-only"
        snap(browser, "job-masked")
        browser.find_element(By.ID, "nav-nodes").click()
        loaded(browser, "/nodes")
        assert browser.find_elements(By.CSS_SELECTOR, "#nodes-table tr[data-node]")
        snap(browser, "nodes")


def test_the_page_works_mounted_under_a_prefix(scene: Scene, browser: Any) -> None:
    from werkzeug.middleware.dispatcher import DispatcherMiddleware

    def host(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"the application"]

    mounted = DispatcherMiddleware(host, {"/ops/ratchet": dashboard_of(scene)})
    with serve(mounted) as base:  # type: ignore[arg-type]
        browser.get(base + "ops/ratchet")  # redirected to the trailing slash
        loaded(browser, "/")
        assert browser.current_url.endswith("/ops/ratchet/")
        failed = browser.find_element(By.CSS_SELECTOR, '[data-count-status="FAILED"] .value')
        assert failed.text == "1"


def test_chromium_is_the_system_one() -> None:
    assert shutil.which("chromium") == str(CHROMIUM) or CHROMIUM.exists()
