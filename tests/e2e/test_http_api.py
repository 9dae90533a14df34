"""The HTTP/JSON API of a real ``shardcron dev``, every route through a plain HTTP client.

Bodies are the proto's canonical JSON; errors are ``{"code", "message", "field"}`` with
the HTTP status of their gRPC code; everything is scoped to the ``x-shardcron-owner``
header as over gRPC. The OpenAPI document is checked with an OpenAPI validator and
against the routes served.
"""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Iterator

import pytest
from openapi_spec_validator import validate

from shardcron.client.types import RunState
from shardcron.coordinator.http.routes import ROUTES
from tests.e2e.harness import DevServer
from tests.support.http_client import HttpApi
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e


def command_job(name: str, script: str, **spec: object) -> dict[str, object]:
    return {
        "spec": {
            "name": name,
            "task": {"command": {"argv": ["sh", "-c", script]}},
            "schedule": {"kind": "SCHEDULE_KIND_IMMEDIATE"},
            **spec,
        }
    }


@pytest.fixture
def http(dev: DevServer) -> Iterator[HttpApi]:
    yield HttpApi(dev.http_url, owner=f"h-{uuid.uuid4().hex[:10]}")


def run_state(http: HttpApi, run_id: str) -> str:
    status, run = http.call("GET", f"/v1/runs/{run_id}")
    assert status == 200, run
    return str(run["state"])


def test_job_lifecycle_through_every_job_route(http: HttpApi) -> None:
    cron = {"kind": "SCHEDULE_KIND_CRON", "cron": "0 3 * * *", "timezone": "Europe/Berlin"}
    body = command_job("nightly", "true", schedule=cron)
    reply = http.read("POST", "/v1/jobs", {**body, "idempotencyKey": "k1"})
    assert reply.status == 202
    created = reply.json
    job_id = created["job"]["id"]
    assert reply.headers["Location"] == f"/v1/jobs/{job_id}"
    assert created["created"] is True and created["job"]["state"] == "JOB_STATE_ACTIVE"
    assert run_state(http, created["firstRunId"]) == "RUN_STATE_PENDING"
    again = http.read("POST", "/v1/jobs", {**body, "idempotencyKey": "k1"}).json
    assert again["job"]["id"] == job_id and "created" not in again  # false: left out

    status, job = http.call("GET", f"/v1/jobs/{job_id}")
    assert status == 200 and job["spec"]["schedule"]["cron"] == "0 3 * * *"
    other = http.read("POST", "/v1/jobs", command_job("other", "true", schedule=cron)).json
    status, page = http.call("GET", "/v1/jobs?pageSize=1")
    assert status == 200 and [j["id"] for j in page["jobs"]] == [job_id]
    status, page = http.call("GET", f"/v1/jobs?pageSize=1&pageToken={page['nextPageToken']}")
    assert [j["id"] for j in page["jobs"]] == [other["job"]["id"]]
    assert [j["id"] for j in http.call("GET", "/v1/jobs?namePrefix=nigh")[1]["jobs"]] == [job_id]

    spec = {**job["spec"], "name": "nightly-2"}
    status, updated = http.call("PUT", f"/v1/jobs/{job_id}", {"expectedVersion": 1, "spec": spec})
    assert status == 200 and updated["version"] == "2" and updated["spec"]["name"] == "nightly-2"
    status, stale = http.call("PUT", f"/v1/jobs/{job_id}", {"expectedVersion": 1, "spec": spec})
    assert status == 412 and stale["code"] == "ABORTED"

    status, paused = http.call("POST", f"/v1/jobs/{job_id}/pause")
    assert status == 200 and paused["state"] == "JOB_STATE_PAUSED"
    assert http.call("GET", "/v1/jobs?state=PAUSED")[1]["jobs"][0]["id"] == job_id
    status, refused = http.call("POST", f"/v1/jobs/{job_id}/runNow")
    assert status == 409 and refused["code"] == "FAILED_PRECONDITION"
    status, resumed = http.call("POST", f"/v1/jobs/{job_id}/resume", {"expectedVersion": 3})
    assert status == 200 and resumed["state"] == "JOB_STATE_ACTIVE"
    status, manual = http.call("POST", f"/v1/jobs/{job_id}/runNow")
    assert status == 200 and manual["jobId"] == job_id
    wait_until(lambda: run_state(http, manual["id"]) == "RUN_STATE_SUCCEEDED", what="manual run")

    status, job_status = http.call("GET", f"/v1/jobs/{job_id}/status")
    assert status == 200 and job_status["job"]["id"] == job_id
    assert job_status["latestRun"]["id"] == manual["id"]
    assert job_status["nextRun"]["state"] == "RUN_STATE_PENDING"
    status, runs = http.call("GET", f"/v1/jobs/{job_id}/runs?state=SUCCEEDED")
    assert status == 200 and [r["id"] for r in runs["runs"]] == [manual["id"]]

    status, deleted = http.call("DELETE", f"/v1/jobs/{job_id}?cancelRunning=true")
    assert status == 200 and deleted["state"] == "JOB_STATE_DELETED"
    assert http.call("GET", "/v1/jobs?state=DELETED")[1]["jobs"][0]["id"] == job_id


def test_runs_across_jobs_output_as_json_sse_and_text_then_cancel(
    http: HttpApi, dev: DevServer
) -> None:
    script = "echo one; sleep 1; echo two; sleep 300"
    first = http.read("POST", "/v1/jobs", command_job("long-a", script)).json["firstRunId"]
    second = http.read("POST", "/v1/jobs", command_job("long-b", "sleep 300")).json["firstRunId"]

    def running() -> set[str]:
        status, page = http.call("GET", "/v1/runs?state=RUNNING&pageSize=10")
        assert status == 200, page
        return {r["id"] for r in page.get("runs", [])}

    wait_until(lambda: running() == {first, second}, what="both runs RUNNING")
    # the SDK and the CLI list the same runs, with no job named
    client = dev.client(owner=http.owner)
    assert {r.id for r in client.iter_runs(states={RunState.RUNNING})} == {first, second}
    listed = dev.cli("run", "list", "--state", "RUNNING", owner=http.owner or "").stdout
    assert first in listed and second in listed

    wait_until(
        lambda: b"two" in http.read("GET", f"/v1/runs/{first}/output?format=text").raw,
        what="output",
    )
    chunks = http.call("GET", f"/v1/runs/{first}/output")[1]["chunks"]
    assert "".join(__import__("base64").b64decode(c["data"]).decode() for c in chunks) == (
        "one\ntwo\n"
    )
    # follow while the run still runs: both streams end once it is cancelled
    followed: dict[str, bytes] = {}

    def follow(name: str, query: str) -> None:
        followed[name] = http.read("GET", f"/v1/runs/{first}/output?{query}").raw

    readers = [
        threading.Thread(target=follow, args=("sse", "follow=true")),
        threading.Thread(target=follow, args=("text", "follow=true&format=text&offset=4")),
    ]
    for t in readers:
        t.start()
    status, cancelled = http.call("POST", f"/v1/runs/{first}/cancel")
    assert status == 200, cancelled
    wait_until(lambda: run_state(http, first) == "RUN_STATE_CANCELLED", what="CANCELLED")
    for t in readers:
        t.join(timeout=30)
    assert followed["text"] == b"two\n"
    events = [e for e in followed["sse"].decode().split("\n\n") if e]
    chunks = [e.split("\n", 2) for e in events if e.startswith("event: chunk\n")]
    # however the bytes are cut into chunks, each event's id is the offset after it
    data = [base64.b64decode(json.loads(c[2][len("data: ") :])["data"]) for c in chunks]
    assert b"".join(data) == b"one\ntwo\n"
    ends = [sum(len(d) for d in data[: i + 1]) for i in range(len(data))]
    assert [c[1] for c in chunks] == [f"id: {end}" for end in ends]
    assert events[-1].startswith("event: eof\n")
    status, again = http.call("POST", f"/v1/runs/{first}/cancel")
    assert status == 409 and again["code"] == "FAILED_PRECONDITION"
    assert http.call("POST", f"/v1/runs/{second}/cancel")[0] == 200
    wait_until(lambda: running() == set(), what="no run RUNNING")


def test_dead_letters_list_replay_drop(http: HttpApi) -> None:
    once = {"retry": {"maxAttempts": 1}}
    job = http.read("POST", "/v1/jobs", command_job("fails", "exit 3", **once)).json
    job_id, run_id = job["job"]["id"], job["firstRunId"]
    wait_until(
        lambda: http.call("GET", f"/v1/deadLetters?jobId={job_id}")[1].get("runs"),
        what="dead letter",
    )
    status, dead = http.call("GET", "/v1/deadLetters")
    assert status == 200 and [r["id"] for r in dead["runs"]] == [run_id]
    assert dead["runs"][0]["reason"] == "RUN_REASON_NON_ZERO_EXIT"
    status, replayed = http.call("POST", "/v1/deadLetters/replay", {"runIds": [run_id]})
    assert status == 200 and replayed["runs"][0]["replayedFrom"] == run_id
    replay_id = replayed["runs"][0]["id"]
    wait_until(
        lambda: (
            [r["id"] for r in http.call("GET", "/v1/deadLetters")[1].get("runs", [])] == [replay_id]
        ),
        what="the replay dead too",
    )
    status, dropped = http.call("POST", "/v1/deadLetters/drop", {"jobId": job_id})
    assert status == 200 and dropped == {"dropped": 1}
    assert http.call("GET", "/v1/deadLetters")[1] == {}


def test_cluster_and_preview(http: HttpApi) -> None:
    status, cluster = http.call("GET", "/v1/cluster")
    assert status == 200 and cluster["mode"] == "dev" and cluster["leader"] == "dev"
    assert len(cluster["workers"]) == 2 and cluster["workers"][0]["slotsTotal"] == 8
    schedule = {"kind": "SCHEDULE_KIND_CRON", "cron": "30 2 * * *", "timezone": "Europe/Berlin"}
    body = {"schedule": schedule, "count": 3, "after": "2027-03-26T00:00:00Z"}
    status, preview = http.call("POST", "/v1/preview", body)
    assert status == 200
    # 02:30 does not exist on 2027-03-28 in Berlin: shifted to 03:00 CEST
    assert [f["localTime"] for f in preview["fires"]] == [
        "2027-03-26T02:30:00+01:00",
        "2027-03-27T02:30:00+01:00",
        "2027-03-28T03:00:00+02:00",
    ]


@pytest.mark.parametrize(
    ("method", "path", "kw", "status", "code", "field"),
    [
        ("POST", "/v1/jobs", {"data": b"{not json"}, 400, "INVALID_ARGUMENT", "body"),
        ("POST", "/v1/jobs", {"data": b"[1]"}, 400, "INVALID_ARGUMENT", "body"),
        ("POST", "/v1/jobs", {"body": {"spec": {"nmae": "x"}}}, 400, "INVALID_ARGUMENT", "body"),
        ("POST", "/v1/jobs", {"body": {"spec": {"name": ""}}}, 400, "INVALID_ARGUMENT", "spec.name"),
        ("GET", "/v1/jobs?pageSize=ten", {}, 400, "INVALID_ARGUMENT", "pageSize"),
        ("GET", "/v1/jobs?state=RUNNING", {}, 400, "INVALID_ARGUMENT", "state"),
        ("GET", "/v1/jobs?bogus=1", {}, 400, "INVALID_ARGUMENT", "bogus"),
        ("GET", "/v1/runs?pageToken=bad", {}, 400, "INVALID_ARGUMENT", "page_token"),
        ("GET", "/v1/jobs", {"headers": {"x-shardcron-owner": "a b"}}, 400, "INVALID_ARGUMENT",
         "x-shardcron-owner"),
        ("GET", "/v1/jobs/nope", {}, 404, "NOT_FOUND", ""),
        ("GET", "/v1/runs/nope/output?follow=true", {}, 404, "NOT_FOUND", ""),
        ("POST", "/v1/preview", {"body": {}}, 400, "INVALID_ARGUMENT", "source"),
    ],
)  # fmt: skip
def test_bad_input_is_answered_with_its_code_and_field_and_changes_nothing(
    http: HttpApi, method: str, path: str, kw: dict, status: int, code: str, field: str
) -> None:
    reply = http.read(method, path, **kw)
    assert (reply.status, reply.json["code"], reply.json["field"]) == (status, code, field)
    assert reply.json["message"]
    assert http.call("GET", "/v1/jobs")[1] == {}


def test_every_call_is_scoped_to_its_owner(dev: DevServer) -> None:
    alice = HttpApi(dev.http_url, owner=f"a-{uuid.uuid4().hex[:8]}")
    bob = HttpApi(dev.http_url, owner=f"b-{uuid.uuid4().hex[:8]}")
    job = alice.read("POST", "/v1/jobs", command_job("mine", "true")).json
    assert job["job"]["owner"] == alice.owner
    for method, path in [
        ("GET", f"/v1/jobs/{job['job']['id']}"),
        ("GET", f"/v1/jobs/{job['job']['id']}/runs"),
        ("GET", f"/v1/runs/{job['firstRunId']}"),
        ("POST", f"/v1/jobs/{job['job']['id']}/pause"),
        ("DELETE", f"/v1/jobs/{job['job']['id']}"),
    ]:
        assert bob.call(method, path)[0] == 404, (method, path)
    assert bob.call("GET", "/v1/jobs")[1] == {}
    assert bob.call("GET", "/v1/runs")[1] == {}
    assert alice.call("GET", f"/v1/jobs/{job['job']['id']}")[1]["state"] != "JOB_STATE_DELETED"


def test_openapi_document_is_valid_and_names_every_route_served(http: HttpApi) -> None:
    status, document = http.call("GET", "/v1/openapi.json")
    assert status == 200
    validate(document)
    served = {(r.method.lower(), r.path) for r in ROUTES}
    documented = {(m, p) for p, ops in document["paths"].items() for m in ops}
    assert documented == served
    assert document["components"]["schemas"]["shardcron.v1.Run"]["properties"]["state"]["enum"]
    page = http.read("GET", "/")
    assert page.status == 200 and b"shardcron" in page.raw
    assert http.read("GET", "/ui/app.js").status == 200
