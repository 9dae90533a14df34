"""The dashboard in headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
installed by ``make test``), driven with Selenium against a real ``shardcron dev``.

It opens the jobs list, sees a job created through the API appear, opens the job and
its run, sees the run's output arrive, cancels the run and sees CANCELLED; reads the
overview (runs now, waiting and why, failures, its charts, live), the list's health
strips, a failing job's page and the notifications page. Every page is saved as a
screenshot under ``tests/output/dashboard/`` (not versioned); with ``SHARDCRON_DOC_IMAGES=1``, the
overview, the job list and a failing job's page also under ``docs/img/``, where the
README shows them.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.e2e.harness import REPO, DevServer
from tests.support.http_client import HttpApi
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

SCREENSHOTS = REPO / "tests" / "output" / "dashboard"
DOC_IMAGES = REPO / "docs" / "img"
WAIT = 30.0  # seconds a page may take to show what a step awaits: a hang, not a pace


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "chromium and chromium-driver are needed: run `make browser`"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument("--window-size=1280,900")
    browser = webdriver.Chrome(options=options, service=Service(driver))
    yield browser
    browser.quit()


def shoot(browser: WebDriver, name: str, *, doc: str = "") -> Path:
    """The page as a PNG under ``SCREENSHOTS``; with ``doc``, under ``DOC_IMAGES`` as
    that name too when ``SHARDCRON_DOC_IMAGES`` is set (the README's pictures)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    browser.save_screenshot(str(path))
    if doc and os.environ.get("SHARDCRON_DOC_IMAGES"):
        shutil.copyfile(path, DOC_IMAGES / f"{doc}.png")
    return path


def waiting(browser: WebDriver) -> WebDriverWait[WebDriver]:
    """A wait that looks again for an element the page redrew between finding and reading it."""
    return WebDriverWait(
        browser, WAIT, poll_frequency=0.2, ignored_exceptions=(StaleElementReferenceException,)
    )


def text_of(browser: WebDriver, css: str) -> str:
    found = browser.find_elements(By.CSS_SELECTOR, css)
    return found[0].text if found else ""


def wait_for(browser: WebDriver, css: str, text: str = "") -> None:
    waiting(browser).until(
        lambda b: text in text_of(b, css) if text else b.find_elements(By.CSS_SELECTOR, css),
        message=f"{css} showing {text!r}",
    )


def click(browser: WebDriver, by: str, value: str) -> None:
    """Clicks the element, found again if a refresh of the page replaced it meanwhile."""

    def clicked(b: WebDriver) -> bool:
        try:
            b.find_element(by, value).click()
        except (StaleElementReferenceException, NoSuchElementException):
            return False
        return True

    waiting(browser).until(clicked, message=f"click {value}")


def test_jobs_job_run_output_and_cancel_in_the_browser(dev: DevServer, browser: WebDriver) -> None:
    owner = f"ui-{uuid.uuid4().hex[:8]}"
    http = HttpApi(dev.http_url, owner=owner)
    browser.get(dev.http_url + "/#/jobs")
    field = browser.find_element(By.ID, "owner")
    field.clear()
    field.send_keys(owner + Keys.ENTER)  # the dashboard keeps it, as a user's choice
    wait_for(browser, "#jobs-table", "No jobs.")
    assert browser.execute_script("return localStorage.getItem('shardcron.owner')") == owner
    shoot(browser, "jobs-empty")

    spec = {
        "name": "hello-dashboard",
        "task": {"command": {"argv": ["sh", "-c", "echo hello from the dashboard; sleep 300"]}},
        "schedule": {"kind": "SCHEDULE_KIND_IMMEDIATE"},
    }
    created = http.read("POST", "/v1/jobs", {"spec": spec})
    assert created.status == 202
    job_id = created.json["job"]["id"]
    browser.refresh()
    wait_for(browser, f'tr[data-job-id="{job_id}"]', "hello-dashboard")
    shoot(browser, "jobs")

    click(browser, By.LINK_TEXT, "hello-dashboard")
    wait_for(browser, "#job-runs tr[data-run-id]", "RUNNING")
    shoot(browser, "job")

    run_id = created.json["firstRunId"]
    click(browser, By.LINK_TEXT, run_id)
    wait_for(browser, "#run-output", "hello from the dashboard")
    wait_for(browser, "#run-state", "RUNNING")
    shoot(browser, "run")

    click(browser, By.ID, "cancel-run")
    wait_for(browser, "#run-state", "CANCELLED")
    waiting(browser).until(
        lambda b: b.find_element(By.ID, "run-output").get_attribute("data-ended") == "true",
        message="the output stream ends with the run",
    )
    wait_for(browser, "#run-usage", "peak memory")  # what its command used
    shoot(browser, "run-cancelled")
    cancelled = http.call("GET", f"/v1/runs/{run_id}")[1]
    assert cancelled["state"] == "RUN_STATE_CANCELLED"
    assert int(cancelled["usage"]["peakMemoryBytes"]) > 0

    for page, ready in [
        ("running", "No runs."),
        ("dead", "Dead letters"),
        ("cluster", "dev-worker-0"),
    ]:
        browser.get(f"{dev.http_url}/#/{page}")
        wait_for(browser, "#main", ready)
        shoot(browser, page)
    browser.get(f"{dev.http_url}/#/jobs/{job_id}")
    wait_for(browser, "#job-runs", "CANCELLED")
    shoot(browser, "job-after-cancel")
    logs = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert logs == []


def test_jobs_list_filters_by_state_searches_by_name_and_pages(
    dev: DevServer, browser: WebDriver
) -> None:
    owner = f"ui-{uuid.uuid4().hex[:8]}"
    http = HttpApi(dev.http_url, owner=owner)
    yearly = {"kind": "SCHEDULE_KIND_CRON", "cron": "0 0 1 1 *"}
    task = {"command": {"argv": ["true"]}}
    ids = [
        http.read("POST", "/v1/jobs", {"spec": {"name": f"bulk-{i:02}", "task": task, "schedule": yearly}}).json["job"]["id"]
        for i in range(21)
    ]  # fmt: skip
    http.read("POST", "/v1/jobs", {"spec": {"name": "other", "task": task, "schedule": yearly}})
    assert http.call("POST", f"/v1/jobs/{ids[3]}/pause")[0] == 200
    browser.get(dev.http_url + "/")
    browser.execute_script("localStorage.setItem('shardcron.owner', arguments[0])", owner)
    browser.get(dev.http_url + "/#/jobs?q=bulk")
    browser.refresh()
    wait_for(browser, "#jobs-table", "bulk-19")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#jobs-table tr[data-job-id]")) == 20
    assert "other" not in text_of(browser, "#jobs-table")
    click(browser, By.ID, "next-page")
    wait_for(browser, "#jobs-table", "bulk-20")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#jobs-table tr[data-job-id]")) == 1
    shoot(browser, "jobs-page-2")
    Select(browser.find_element(By.ID, "state-filter")).select_by_value("PAUSED")
    wait_for(browser, f'tr[data-job-id="{ids[3]}"]', "PAUSED")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#jobs-table tr[data-job-id]")) == 1
    shoot(browser, "jobs-paused")


def test_a_run_page_shows_the_last_mib_of_a_long_output(dev: DevServer, browser: WebDriver) -> None:
    """The blob store keeps a run's whole output (up to a GiB): the run page shows its
    last MiB, and says where the rest is."""
    owner = f"ui-{uuid.uuid4().hex[:8]}"
    http = HttpApi(dev.http_url, owner=owner)
    spec = {
        "name": "long-output",
        "task": {"command": {"argv": ["seq", "1", "400000"]}},  # 2.7 MB
        "schedule": {"kind": "SCHEDULE_KIND_IMMEDIATE"},
    }
    run_id = http.read("POST", "/v1/jobs", {"spec": spec}).json["firstRunId"]
    wait_until(lambda: http.call("GET", f"/v1/runs/{run_id}")[1]["state"] == "RUN_STATE_SUCCEEDED")
    browser.get(dev.http_url + "/#/jobs")
    field = browser.find_element(By.ID, "owner")
    field.clear()
    field.send_keys(owner + Keys.ENTER)  # kept for the next page
    wait_for(browser, "#jobs-table", "long-output")
    browser.get(f"{dev.http_url}/#/runs/{run_id}")
    waiting(browser).until(
        lambda b: b.find_element(By.ID, "run-output").get_attribute("data-ended") == "true",
        message="the output shown to its end",
    )
    shown = browser.execute_script("return document.getElementById('run-output').textContent")
    size = len(b"".join(b"%d\n" % i for i in range(1, 400_001)))
    note = f"[the first {size - (1 << 20)} bytes: shardcron run logs {run_id} --head"
    assert shown.startswith(note)
    assert shown.endswith("399999\n400000\n")
    assert len(shown) - len(shown.partition("\n")[0]) - 1 == 1 << 20


def runs_ended(http: HttpApi, job_id: str, count: int) -> list[dict[str, Any]]:
    """The job's runs once ``count`` of them are final, newest first."""
    final = {"RUN_STATE_SUCCEEDED", "RUN_STATE_FAILED", "RUN_STATE_TIMED_OUT"}

    def ended() -> list[dict[str, Any]] | None:
        runs = http.call("GET", f"/v1/jobs/{job_id}/runs?pageSize=50")[1].get("runs", [])
        return runs if sum(r["state"] in final for r in runs) >= count else None

    return wait_until(ended)


def open_as(browser: WebDriver, url: str, owner: str) -> None:
    browser.get(url)
    browser.execute_script("localStorage.setItem('shardcron.owner', arguments[0])", owner)
    browser.refresh()


def test_job_list_shows_each_jobs_last_runs_and_the_job_page_its_failure(
    dev: DevServer, browser: WebDriver
) -> None:
    """The list: the last run's state beside the job's (a one-shot job that failed shows
    FAILED, not only COMPLETED), a strip of its last runs, green and red, each a link to
    its run, and the success rate over them. The job page: the failure inline (its
    reason, exit code, error and the tail of its output) and a chart of its runs'
    durations and start lags."""
    owner = f"ui-{uuid.uuid4().hex[:8]}"
    http = HttpApi(dev.http_url, owner=owner)
    yearly = {"kind": "SCHEDULE_KIND_CRON", "cron": "0 0 1 1 *"}
    once = {"maxAttempts": 1}

    def spec(name: str, script: str, schedule: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": name,
            "task": {"command": {"argv": ["sh", "-c", script]}},
            "schedule": schedule,
            "retry": once,
        }

    def create(name: str, script: str, schedule: dict[str, Any]) -> str:
        return str(
            http.read("POST", "/v1/jobs", {"spec": spec(name, script, schedule)}).json["job"]["id"]
        )

    flaky = create("flaky", "echo checking the mirror", yearly)
    for i in range(4):  # three good runs, then one whose mirror is gone
        if i == 3:
            broken = spec(
                "flaky", "echo checking the mirror; echo mirror unreachable >&2; exit 7", yearly
            )
            version = http.call("GET", f"/v1/jobs/{flaky}")[1]["version"]
            body = {"expectedVersion": version, "spec": broken}
            assert http.call("PUT", f"/v1/jobs/{flaky}", body)[0] == 200
        assert http.call("POST", f"/v1/jobs/{flaky}/runNow", {})[0] == 200
        runs_ended(http, flaky, i + 1)
    once_failed = create("once-failed", "exit 3", {"kind": "SCHEDULE_KIND_IMMEDIATE"})
    runs_ended(http, once_failed, 1)
    wait_until(
        lambda: http.call("GET", f"/v1/jobs/{once_failed}")[1]["state"] == "JOB_STATE_COMPLETED"
    )

    open_as(browser, dev.http_url + "/#/jobs", owner)
    row = f'tr[data-job-id="{flaky}"]'
    wait_for(browser, row, "75% of 4")
    ticks = browser.find_elements(By.CSS_SELECTOR, f"{row} .strip a.tick")
    assert [t.get_attribute("data-state") for t in ticks] == ["SUCCEEDED"] * 3 + ["FAILED"]
    colours = [t.value_of_css_property("background-color") for t in ticks]
    assert colours[0] == colours[1] == colours[2] != colours[3]
    assert "FAILED" in text_of(browser, f"{row} .last-run")
    other = f'tr[data-job-id="{once_failed}"]'
    assert text_of(browser, f"{other} td:nth-child(2)") == "COMPLETED"
    assert text_of(browser, f"{other} .last-run") == "FAILED"
    assert text_of(browser, f"{other} .success-rate") == "0% of 1"
    shoot(browser, "jobs-health", doc="dashboard-jobs")

    ticks[3].click()  # the failed run, from its tick
    wait_for(browser, "#run-state", "FAILED")
    [failed] = [r for r in runs_ended(http, flaky, 4) if r["state"] == "RUN_STATE_FAILED"]
    assert browser.current_url.endswith(f"#/runs/{failed['id']}")

    browser.get(f"{dev.http_url}/#/jobs/{flaky}")
    wait_for(browser, "#last-failure", "mirror unreachable")
    failure = text_of(browser, "#last-failure")
    assert "FAILED" in failure and "NON_ZERO_EXIT" in failure and "exit code 7" in failure
    assert "checking the mirror" in text_of(browser, "#failure-output")
    assert "Failing now" in text_of(browser, "#job-health")
    points = browser.find_elements(By.CSS_SELECTOR, "#job-timings circle.s-duration")
    assert len(points) == 4
    assert len(browser.find_elements(By.CSS_SELECTOR, "#job-timings circle.s-lag")) == 4
    shoot(browser, "job-health", doc="dashboard-job-failing")
    logs = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert logs == []


def test_the_overview_shows_runs_now_waiting_and_why_failures_and_updates_live(
    dev: DevServer, browser: WebDriver
) -> None:
    """The first page: runs running, waiting (with why) and failed in the last hour, a
    chart of runs by outcome and one of start lag, the jobs failing now worst first; a
    failure after the page opened shows without a reload."""
    owner = f"ui-{uuid.uuid4().hex[:8]}"
    http = HttpApi(dev.http_url, owner=owner)
    yearly = {"kind": "SCHEDULE_KIND_CRON", "cron": "0 0 1 1 *"}
    now = {"kind": "SCHEDULE_KIND_IMMEDIATE"}

    def create(name: str, task: dict[str, Any], schedule: dict[str, Any]) -> str:
        spec = {"name": name, "task": task, "schedule": schedule, "retry": {"maxAttempts": 1}}
        return str(http.read("POST", "/v1/jobs", {"spec": spec}).json["job"]["id"])

    def sh(script: str) -> dict[str, Any]:
        return {"command": {"argv": ["sh", "-c", script]}}

    broken = create("backup-db", sh("echo disk full >&2; exit 4"), yearly)
    flaky = create("sync-mirror", sh("exit 2"), yearly)
    for job_id, times in ((broken, 2), (flaky, 1)):
        for i in range(times):
            assert http.call("POST", f"/v1/jobs/{job_id}/runNow", {})[0] == 200
            runs_ended(http, job_id, i + 1)
    fine = create("rotate-logs", sh("true"), now)
    runs_ended(http, fine, 1)
    long = http.read(
        "POST", "/v1/jobs", {"spec": {"name": "long", "task": sh("sleep 300"), "schedule": now}}
    )
    long_run = long.json["firstRunId"]
    create("resize", {"handler": {"name": "resize-images"}}, now)  # no worker serves it
    wait_until(lambda: http.call("GET", f"/v1/runs/{long_run}")[1]["state"] == "RUN_STATE_RUNNING")

    open_as(browser, dev.http_url + "/", owner)  # the overview is the first page
    wait_for(browser, "nav a.active", "Overview")
    wait_for(browser, "#card-running .figure", "1")
    wait_for(browser, "#card-waiting .figure", "1")
    wait_for(browser, "#card-failed .figure", "3")
    assert "no connected worker serves handler resize-images" in text_of(
        browser, "#waiting-reasons"
    )
    rows = browser.find_elements(By.CSS_SELECTOR, "#failing-jobs tr[data-job-id]")
    assert [r.get_attribute("data-job-id") for r in rows] == [broken, flaky]  # worst first
    assert "backup-db" in rows[0].text and "NON_ZERO_EXIT" in rows[0].text
    assert text_of(browser, f'#failing-jobs tr[data-job-id="{broken}"] td.streak') == "2"
    assert browser.find_elements(By.CSS_SELECTOR, "#chart-outcomes rect.bad")
    assert browser.find_elements(By.CSS_SELECTOR, "#chart-outcomes rect.ok")
    titles = " ".join(
        t.get_attribute("textContent")
        for t in browser.find_elements(By.CSS_SELECTOR, "#chart-outcomes g[data-bucket] title")
    )
    assert "failed" in titles and "succeeded" in titles
    assert browser.find_elements(By.CSS_SELECTOR, "#chart-lag circle.s-p50")
    assert "restarts with the node" in text_of(browser, "#history-since")
    shoot(browser, "overview", doc="dashboard-overview")

    assert http.call("POST", f"/v1/jobs/{flaky}/runNow", {})[0] == 200  # no reload after it
    wait_for(browser, "#card-failed .figure", "4")
    wait_for(browser, f'#failing-jobs tr[data-job-id="{flaky}"] td.streak', "2")

    click(browser, By.ID, "window-day")
    wait_for(browser, "#window-day.active")
    wait_for(browser, "#card-failed .figure", "4")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#chart-outcomes g[data-bucket]")) >= 1
    shoot(browser, "overview-day")
    assert http.call("POST", f"/v1/runs/{long_run}/cancel")[0] == 200
    for query, field in (
        ("/v1/overview?window=WEEK", "window"),
        ("/v1/jobs?withHealth=maybe", "withHealth"),
    ):
        status, refused = http.call("GET", query)
        assert (status, refused["code"], refused["field"]) == (400, "INVALID_ARGUMENT", field)


def test_a_run_page_lists_its_result_files_and_downloads_one(
    dev: DevServer, browser: WebDriver, tmp_path: Path
) -> None:
    """The run page lists what its command left in $SHARDCRON_RESULT_DIR (name, size,
    digest) and what was left out; a file's link downloads it with the page's owner."""
    owner = f"ui-{uuid.uuid4().hex[:8]}"
    http = HttpApi(dev.http_url, owner=owner)
    script = 'cd "$SHARDCRON_RESULT_DIR" && printf "a,b\\n1,2\\n" > table.csv && ln -s /etc x'
    spec = {
        "name": "with-results",
        "task": {"command": {"argv": ["sh", "-c", script]}},
        "schedule": {"kind": "SCHEDULE_KIND_IMMEDIATE"},
    }
    run_id = http.read("POST", "/v1/jobs", {"spec": spec}).json["firstRunId"]
    wait_until(lambda: http.call("GET", f"/v1/runs/{run_id}")[1]["state"] == "RUN_STATE_SUCCEEDED")
    browser.get(dev.http_url + "/#/jobs")
    field = browser.find_element(By.ID, "owner")
    field.clear()
    field.send_keys(owner + Keys.ENTER)
    wait_for(browser, "#jobs-table", "with-results")
    browser.get(f"{dev.http_url}/#/runs/{run_id}")
    wait_for(browser, "#run-results", "table.csv")
    assert "x: left out: a symbolic link" in text_of(browser, "#run-results")
    shoot(browser, "run-results")
    browser.execute_cdp_cmd(
        "Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)}
    )
    click(browser, By.LINK_TEXT, "table.csv")
    wait_until(lambda: (tmp_path / "table.csv").exists(), timeout=WAIT)
    assert (tmp_path / "table.csv").read_bytes() == b"a,b\n1,2\n"
    logs = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert logs == []


def test_the_notifications_page_lists_a_jobs_deliveries_and_the_job_links_to_them(
    browser: WebDriver, tmp_path: Path
) -> None:
    """A failing job with a webhook: its delivery shows on the Notifications page (rule,
    reason, status, attempts), and the job's page links to its deliveries alone."""
    from tests.support.webhooks import Receiver

    receiver = Receiver().start()
    node = DevServer(tmp_path / "data", extra=["--workers", "1", "--notify-allow-private"]).start()
    try:
        owner = f"ui-{uuid.uuid4().hex[:8]}"
        http = HttpApi(node.http_url, owner=owner)
        notify = {"webhookUrl": receiver.url + "/hook", "onFailure": True}
        spec = {
            "name": "nightly-export",
            "task": {"command": {"argv": ["sh", "-c", "echo no space left >&2; exit 5"]}},
            "schedule": {"kind": "SCHEDULE_KIND_IMMEDIATE"},
            "retry": {"maxAttempts": 1},
            "notify": notify,
        }
        job_id = http.read("POST", "/v1/jobs", {"spec": spec}).json["job"]["id"]
        quiet = {**spec, "name": "quiet", "notify": notify, "task": {"command": {"argv": ["true"]}}}
        quiet_id = http.read("POST", "/v1/jobs", {"spec": quiet}).json["job"]["id"]
        wait_until(lambda: receiver.of("/hook"), what="the delivery")

        open_as(browser, node.http_url + "/#/notifications", owner)
        wait_for(browser, "nav a.active", "Notifications")
        row = "#deliveries tr[data-delivery-id] td.status"
        wait_for(browser, row, "DELIVERED")
        rows = browser.find_elements(By.CSS_SELECTOR, "#deliveries tr[data-delivery-id]")
        assert len(rows) == 1 and job_id in rows[0].text  # the quiet job sent nothing
        assert text_of(browser, "#deliveries td.rule") == "FAILURE"
        assert text_of(browser, "#deliveries td.attempts") == "1"
        assert "exit code 5" in rows[0].text
        shoot(browser, "notifications")

        browser.get(f"{node.http_url}/#/jobs/{job_id}")
        wait_for(browser, "#job-notify", "its deliveries")
        click(browser, By.LINK_TEXT, "its deliveries")
        wait_for(browser, "h1", job_id)
        wait_for(browser, "#deliveries td.status", "DELIVERED")
        browser.get(f"{node.http_url}/#/notifications?job={quiet_id}")
        wait_for(browser, "#deliveries", "No deliveries.")
        logs = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert logs == []
    finally:
        node.stop()
        receiver.stop()
