"""Pages of other sites against ``shardcron dev`` as ``make dev`` runs it (no auth file:
whoever reaches the loopback port is trusted), in headless Chromium: a page of another
origin sends the requests a browser sends to any site without asking (a ``text/plain``
POST, a form) and one it asks first for (JSON); a page whose host name was made to
resolve to the node (DNS rebinding) loads the node's own address. None of them creates
a job or reads an answer, while the node's own dashboard goes on working and another
owner's job fires on time.
"""

from __future__ import annotations

import http.server
import json
import shutil
import threading
import uuid
from collections.abc import Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.e2e.harness import DevServer, free_port
from tests.support.http_client import HttpApi
from tests.support.victim import Victim, repeat_for, victim_on_time

pytestmark = pytest.mark.e2e

REBOUND = "rebound.test"  # a name the browser resolves to 127.0.0.1, as a rebinding attacker's


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = DevServer(tmp_path_factory.mktemp("cross-site") / "data").start()
    yield server
    server.stop()


def attacker_page(target: str) -> bytes:
    """A page that tries, every way a page can without the node's consent, to create a
    job that runs ``id``, then says so in its title."""
    job = json.dumps({"spec": {"name": "csrf", "task": {"command": {"argv": ["id"]}}}})
    return f"""<!doctype html><html><body>
<form id="f" method="POST" action="{target}/v1/jobs" enctype="text/plain" target="sink">
  <input name='{job[:-1]}' value='"}}'>
</form>
<iframe name="sink"></iframe>
<script>
const body = {json.dumps(job)};
async function attack() {{
  const tries = [
    fetch("{target}/v1/jobs", {{method: "POST", mode: "no-cors", body,
      headers: {{"Content-Type": "text/plain"}}}}),
    fetch("{target}/v1/jobs", {{method: "POST", mode: "no-cors", body}}),
    fetch("{target}/v1/jobs", {{method: "POST", body,
      headers: {{"Content-Type": "application/json"}}}}),
    fetch("{target}/v1/jobs").then((r) => r.text()).then((t) => {{ window.read = t; }}),
  ];
  for (const t of tries) {{ try {{ await t; }} catch (e) {{}} }}
  document.getElementById("f").submit();
  setTimeout(() => {{ document.title = "done"; }}, 1500);
}}
attack();
</script></body></html>""".encode()


@pytest.fixture(scope="module")
def attacker(dev: DevServer) -> Iterator[str]:
    """A web server of another origin (another port) serving ``attacker_page``."""
    page = attacker_page(dev.http_url)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://localhost:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "chromium and chromium-driver are needed: run `make browser`"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
        "--disable-background-networking", f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1",
    ):  # fmt: skip
        options.add_argument(arg)
    browser = webdriver.Chrome(options=options, service=Service(driver))
    yield browser
    browser.quit()


@pytest.fixture(scope="module")
def victim(dev: DevServer) -> Iterator[Victim]:
    client = dev.client(f"victim-{uuid.uuid4().hex[:6]}")
    bystander = Victim(client).start()
    yield bystander
    bystander.stop()
    client.close()


def default_jobs(dev: DevServer) -> list[str]:
    """The jobs of the owner a request naming none acts for."""
    with dev.client("default") as client:
        return [j.id for j in client.list_jobs().items]


def test_a_page_of_another_origin_creates_nothing(
    dev: DevServer, attacker: str, browser: WebDriver, victim: Victim
) -> None:
    before = default_jobs(dev)
    with victim_on_time(victim):
        browser.get(attacker)
        WebDriverWait(browser, 30).until(lambda b: b.title == "done")
        assert browser.execute_script("return window.read === undefined")
    assert default_jobs(dev) == before
    # the same requests, as the browser sent them, and what the node answered
    http = HttpApi(dev.http_url)
    origin = {"Origin": attacker.rstrip("/")}
    status, body = http.call("POST", "/v1/jobs", data=b"{}", headers={**origin})
    assert (status, body["code"]) == (403, "PERMISSION_DENIED") and "Origin" in body["message"]
    plain = {"content-type": "text/plain"}
    status, body = http.call("POST", "/v1/jobs", data=b"{}", headers=plain)
    assert (status, body["field"]) == (415, "content-type")
    assert http.call("POST", "/v1/jobs", data=b"{}", headers={"Origin": "null"})[0] == 403


def test_a_rebound_host_name_is_not_served(
    dev: DevServer, browser: WebDriver, victim: Victim
) -> None:
    with victim_on_time(victim):
        for _ in repeat_for(3.0):
            browser.get(f"http://{REBOUND}:{dev.http_port}/v1/jobs")
            text = browser.find_element("tag name", "body").text
            assert "PERMISSION_DENIED" in text and "Host" in text, text
            assert '"jobs"' not in text
            # the node's own names are served
            for host in ("127.0.0.1", "localhost"):
                browser.get(f"http://{host}:{dev.http_port}/v1/jobs")
                assert "PERMISSION_DENIED" not in browser.find_element("tag name", "body").text
