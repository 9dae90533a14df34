"""The HTTP port attacked as an outsider would, on a real ``shardcron dev`` with an auth
file: each test makes one attack, asserts the node refuses it, and that another
owner's job firing every second still starts on time while it goes on (``Victim``).

- a body is never read before the credential is judged: no credential with a body
  announced and never sent, malformed, or 7.5 MB large is 401 at once, the
  connection closed; a flood of large bodies, anonymous or from a writer, leaves the
  event loop to everyone else; JSON 1,000 levels deep is 400, never a traceback;
- a follow sends its headers at once and stops when its client goes away (the node
  holds no follow once every client left), when its job is deleted, and past the
  principal's ``--max-follows``; WaitRun calls past ``--max-waits`` are refused;
- a request head trickled byte by byte, or an idle connection, is closed after the
  head timeout; connections from one host past the cap are closed at once;
- the owner's ``max_request_bytes`` holds over HTTP as over gRPC; every answer carries
  ``nosniff`` and the dashboard its CSP.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import grpc
import pytest

from shardcron.client.errors import ResourceExhausted
from shardcron.client.sdk import Client
from shardcron.client.types import HandlerTask, JobSpec
from shardcron.coordinator.http.connections import ConnectionLimits
from shardcron.v1 import jobs_pb2, jobs_pb2_grpc
from tests.e2e.harness import DevServer
from tests.support.auth import TOKENS, auth_file_text
from tests.support.http_client import HttpApi, RawHttp, request_head
from tests.support.victim import Victim, repeat_for, victim_on_time
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

MAX_FOLLOWS = 8
MAX_WAITS = 8
SMALL_OWNER = "small"  # an owner whose requests may be 1 MiB at most
QUOTA = f"""
[quota.owner."{SMALL_OWNER}"]
max_request_bytes = 1048576
"""
FAR = "2099-01-01T00:00:00Z"  # a run due then waits through every test


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    data = tmp_path_factory.mktemp("edge") / "data"
    data.parent.joinpath("auth.toml").write_text(auth_file_text() + QUOTA)
    server = DevServer(
        data,
        extra=[
            "--auth-file", str(data.parent / "auth.toml"),
            "--max-follows", str(MAX_FOLLOWS), "--max-waits", str(MAX_WAITS),
        ],
    ).start()  # fmt: skip
    yield server
    server.stop()


@pytest.fixture(scope="module")
def victim(dev: DevServer) -> Iterator[Victim]:
    client = Client(dev.target, owner=f"victim-{uuid.uuid4().hex[:6]}", token=TOKENS["admin"])
    bystander = Victim(client).start()
    time.sleep(2)  # its first fires are past before any attack
    yield bystander
    bystander.stop()
    client.close()


def api(dev: DevServer, principal: str | None = "writer", owner: str | None = None) -> HttpApi:
    headers = {} if principal is None else {"authorization": f"Bearer {TOKENS[principal]}"}
    return HttpApi(dev.http_url, owner=owner, headers=headers)


def far_job(http: HttpApi) -> tuple[str, str]:
    """A job whose one run waits until 2099: its id and its run's."""
    body = {
        "spec": {
            "name": f"far-{uuid.uuid4().hex[:6]}",
            "task": {"handler": {"name": "noop"}},
            "schedule": {"kind": "SCHEDULE_KIND_AT", "at": FAR},
        }
    }
    status, created = http.call("POST", "/v1/jobs", body)
    assert status == 202, created
    return created["job"]["id"], created["firstRunId"]


def large_body(size: int = 7_500_000) -> bytes:
    """A job of some 80,000 short strings: about ``size`` bytes of valid JSON."""
    argv = ["x" * 90] * (size // 94)
    return json.dumps({"spec": {"name": "big", "task": {"command": {"argv": argv}}}}).encode()


def dev_log_errors(dev: DevServer) -> list[str]:
    return [line for line in dev.proc.output().splitlines() if "Traceback" in line]  # type: ignore[union-attr]


def test_no_body_is_read_before_the_credential(dev: DevServer, victim: Victim) -> None:
    writer, anonymous = api(dev, "writer"), api(dev, None)
    deep = b'{"spec": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    with victim_on_time(victim):
        for _ in repeat_for(3.0):
            # a body announced and never sent: answered at once, not waited for
            conn = RawHttp(dev.http_port, timeout=10)
            conn.send(
                request_head(
                    "POST",
                    "/v1/jobs",
                    {"Content-Type": "application/json", "Content-Length": "7500000"},
                )
            )
            status, headers = conn.head()
            assert status == 401 and headers.get("connection") == "close"
            assert conn.closed_by_peer()
            conn.close()
            # malformed: the credential first, so 401, not a parser's 400
            status, body = anonymous.call("POST", "/v1/jobs", data=b"{not json")
            assert (status, body["code"]) == (401, "UNAUTHENTICATED")
            status, body = writer.call("POST", "/v1/jobs", data=b"{not json")
            assert (status, body["field"]) == (400, "body")
            # 1,000 levels deep: refused by its depth, with no traceback in the log
            status, body = writer.call("POST", "/v1/jobs", data=deep)
            assert (status, body["field"]) == (400, "body"), body
            assert "deeper than" in body["message"]
    assert dev_log_errors(dev) == []


def test_a_flood_of_large_bodies_leaves_the_node_to_everyone_else(
    dev: DevServer, victim: Victim
) -> None:
    body = large_body()
    answers: dict[tuple[str | None, int | str], int] = {}
    stop = threading.Event()

    def flood(principal: str | None) -> None:
        http = api(dev, principal)
        while not stop.is_set():
            try:
                answer: int | str = http.read("POST", "/v1/jobs", data=body).status
            except OSError:  # the node closed the connection before the body was sent
                answer = "closed"
            key = (principal, answer)
            answers[key] = answers.get(key, 0) + 1

    threads = [threading.Thread(target=flood, args=(p,)) for p in (None, None, "writer", "writer")]
    with victim_on_time(victim):
        for t in threads:
            t.start()
        time.sleep(8)
        stop.set()
        for t in threads:
            t.join(60)
    # anonymous: refused unread; the writer's: read, decoded, and over 4 MiB as gRPC counts
    assert {answer for p, answer in answers if p is None} <= {401, "closed"}, answers
    assert {answer for p, answer in answers if p == "writer"} == {429}, answers
    assert dev_log_errors(dev) == []


def test_follows_answer_at_once_end_with_their_client_and_are_capped(
    dev: DevServer, victim: Victim
) -> None:
    writer, reader = api(dev, "writer"), api(dev, "reader")
    job_id, run_id = far_job(writer)
    path = f"/v1/runs/{run_id}/output?follow=true"
    auth = {"authorization": f"Bearer {TOKENS['reader']}"}
    with victim_on_time(victim), ExitStack() as stack:
        follows = []
        for _ in range(MAX_FOLLOWS):
            conn = RawHttp(dev.http_port, timeout=10)
            stack.callback(conn.close)
            conn.send(request_head("GET", path, auth))
            status, headers = conn.head()  # at once, though the run has no output yet
            assert (status, headers["content-type"]) == (200, "text/event-stream")
            follows.append(conn)
        assert follows_open(dev) == MAX_FOLLOWS
        status, refused = reader.call("GET", path)
        assert (status, refused["code"]) == (429, "RESOURCE_EXHAUSTED")
        assert refused["message"].startswith("max_follows:")
        for conn in follows:
            conn.close()
        wait_until(lambda: follows_open(dev) == 0, timeout=10, what="no follow left open")
        # a follow of a run whose job is deleted ends, with its eof
        ended: dict[str, Any] = {}
        reading = threading.Thread(target=lambda: ended.update(r=reader.read("GET", path)))
        reading.start()
        wait_until(lambda: follows_open(dev) == 1, what="the follow open")
        assert writer.call("DELETE", f"/v1/jobs/{job_id}")[0] == 200
        reading.join(30)
        assert "event: eof" in ended["r"].raw.decode()


def test_waits_are_capped_per_principal(dev: DevServer, victim: Victim) -> None:
    _, run_id = far_job(api(dev, "writer"))
    metadata = (("authorization", f"Bearer {TOKENS['reader']}"),)
    request = jobs_pb2.WaitRunRequest(run_id=run_id)
    request.timeout.FromSeconds(30)
    with victim_on_time(victim), grpc.insecure_channel(dev.target) as channel:
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        waits = [
            stub.WaitRun.future(request, metadata=metadata, timeout=40) for _ in range(MAX_WAITS)
        ]
        wait_until(lambda: waits_open(dev) == MAX_WAITS, what="every wait open")
        for _ in repeat_for(3.0):  # every wait held while more are asked for
            with pytest.raises(grpc.RpcError) as refused:
                stub.WaitRun(request, metadata=metadata, timeout=10)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert refused.value.details().startswith("max_waits:")
        for wait in waits:
            wait.cancel()
        wait_until(lambda: waits_open(dev) == 0, what="no wait left open")


def test_slow_heads_and_idle_connections_are_closed_and_connections_capped(
    dev: DevServer, victim: Victim
) -> None:
    limits = ConnectionLimits()
    with victim_on_time(victim), ExitStack() as stack:
        slow = []
        for _ in range(100):
            conn = RawHttp(dev.http_port, timeout=0.2)
            stack.callback(conn.close)
            conn.send(b"GET /v1/jobs HTTP/1.1\r\n")
            slow.append(conn)
        trickle_until = time.monotonic() + limits.head_timeout + 5
        while time.monotonic() < trickle_until:  # a byte every 2 s from each
            for conn in slow:
                try:
                    conn.send(b"X")
                except OSError:
                    pass
            time.sleep(2)
        still_open = [c for c in slow if not c.closed_by_peer()]
        assert still_open == [], f"{len(still_open)} slow connections still open"
        # from one host, the connections past the cap are closed at once
        idle = []
        for _ in range(limits.per_host + 10):
            conn = RawHttp(dev.http_port, timeout=1)
            stack.callback(conn.close)
            idle.append(conn)
        time.sleep(1)
        refused = [c for c in idle if c.closed_by_peer()]
        assert len(refused) >= 10, len(refused)
        assert "shardcron_http_connections_refused_total" in dev.metrics()
        for conn in idle:
            conn.close()
    # once they are gone, this host is served again
    assert api(dev, "reader").call("GET", "/v1/jobs")[0] == 200


def test_max_request_bytes_holds_over_http_as_over_grpc(dev: DevServer, victim: Victim) -> None:
    payload = b"x" * (1 << 20)
    encoded = base64.b64encode(payload).decode()
    body = {"spec": {"name": "p", "task": {"handler": {"name": "echo", "payload": encoded}}}}
    small = api(dev, "admin", owner=SMALL_OWNER)
    auth = {"authorization": f"Bearer {TOKENS['admin']}", "x-shardcron-owner": SMALL_OWNER}
    announced = {**auth, "Content-Type": "application/json", "Content-Length": "4000000"}
    client = Client(dev.target, owner=SMALL_OWNER, token=TOKENS["admin"])
    with victim_on_time(victim):
        for _ in repeat_for(3.0):
            status, refused = small.call("POST", "/v1/jobs", body)
            assert (status, refused["code"]) == (429, "RESOURCE_EXHAUSTED"), refused
            assert refused["message"].startswith("max_request_bytes:")
            with pytest.raises(ResourceExhausted, match="^max_request_bytes:"):
                client.create_job(JobSpec(name="p", task=HandlerTask(name="echo", payload=payload)))
            # a JSON body announced far over the cap is refused before it is read (413)
            conn = RawHttp(dev.http_port, timeout=10)
            conn.send(request_head("POST", "/v1/jobs", announced))
            status, headers = conn.head()
            assert (status, headers.get("connection")) == (413, "close")
            assert conn.closed_by_peer()
            conn.close()
    assert client.list_jobs().items == []
    client.close()


def test_every_answer_says_nosniff_and_the_dashboard_its_csp(dev: DevServer) -> None:
    http = api(dev, None)
    page = http.read("GET", "/")
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    csp = page.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert page.headers["X-Frame-Options"] == "DENY"
    for path in ("/v1/jobs", "/v1/nowhere", "/ui/app.js", "/v1/openapi.json"):
        assert http.read("GET", path).headers.get("X-Content-Type-Options") == "nosniff", path


def follows_open(dev: DevServer) -> float:
    return _metric(dev, 'shardcron_long_calls_open{kind="max_follows"}')


def waits_open(dev: DevServer) -> float:
    return _metric(dev, 'shardcron_long_calls_open{kind="max_waits"}')


def _metric(dev: DevServer, sample: str) -> float:
    for line in dev.metrics().splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    return 0.0
