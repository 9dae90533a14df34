"""No input stops the HTTP port: hypothesis sends every route any body, query and path
a client could, as raw bytes, to a real node with one in-process worker
(``NodeThread``):

- any JSON (nested up to twice as deep as the port takes), and bytes that are not JSON
  or not UTF-8, as the body of every write;
- the canonical JSON of any request message the route's method takes (drawn from the
  proto descriptors, ``tests/support/proto_strategies.py``), so that decoding and
  validation are passed through to their last checks;
- any query parameters and path ids, and any content type.

Every answer must say what was wrong with the request (a 4xx naming it) or be a
success, never a 500; the node must log no ERROR (no traceback for any input); and
afterwards it still serves: a new job runs to SUCCEEDED. Derandomized: CI runs the same
examples every time, and no hypothesis database is written.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from shardcron.coordinator.http.bodies import MAX_DEPTH
from shardcron.coordinator.http.routes import ROUTES, Route
from tests.support import proto_strategies as ps
from tests.support.http_client import HttpApi
from tests.support.node_thread import NodeThread
from tests.support.waiting import wait_until

OWNER = "fuzz"
ANSWERS = {200, 202, 400, 404, 409, 412, 413, 415, 429}
WITH_BODY = [r for r in ROUTES if r.body]
FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=30,
)


def nested(depth: int) -> bytes:
    """A JSON object ``depth`` levels deep, arrays and objects in turn."""
    return b'{"spec": ' + b'{"a": [' * (depth // 2) + b"]}" * (depth // 2) + b"}"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeThread]:
    thread = NodeThread(tmp_path_factory.mktemp("http-fuzz"), http=True).start()
    yield thread
    thread.stop()


def path_of(route: Route, ids: str) -> str:
    path = route.path
    for name in ("jobId", "runId"):
        path = path.replace("{" + name + "}", urllib.parse.quote(ids, safe=""))
    return path


def send(
    node: NodeThread,
    route: Route,
    body: bytes,
    *,
    ids: str = "x",
    query: str = "",
    content_type: str = "application/json",
) -> int:
    http = HttpApi(node.http_url, owner=OWNER)
    target = path_of(route, ids) + (f"?{query}" if query else "")
    reply = http.read(route.method, target, data=body, headers={"content-type": content_type})
    assert reply.status in ANSWERS, (route.path, reply.status, reply.raw[:300])
    if reply.status >= 400:
        error = json.loads(reply.raw)
        assert set(error) == {"code", "message", "field"} and error["message"]
    return reply.status


def no_errors(node: NodeThread) -> None:
    assert node.errors.records == [], node.errors.records[:3]


@FUZZ
@given(route=st.sampled_from(WITH_BODY), value=JSON)
def test_any_json_body(node: NodeThread, route: Route, value: Any) -> None:
    send(node, route, json.dumps(value).encode())
    no_errors(node)


@FUZZ
@given(route=st.sampled_from(WITH_BODY), raw=st.binary(max_size=200))
def test_bytes_that_are_not_json(node: NodeThread, route: Route, raw: bytes) -> None:
    send(node, route, raw)
    no_errors(node)


@FUZZ
@given(route=st.sampled_from(WITH_BODY), data=st.data())
def test_any_request_message_as_json(node: NodeThread, route: Route, data: st.DataObject) -> None:
    assert route.request is not None
    message = data.draw(ps.messages(route.request.DESCRIPTOR))
    try:
        fields = json_format.MessageToDict(message)
    except json_format.SerializeToJsonError:
        reject()  # a time or duration JSON cannot spell: no HTTP client can send it
    send(node, route, json.dumps(fields).encode())
    no_errors(node)


@FUZZ
@given(
    route=st.sampled_from(ROUTES),
    ids=st.text(min_size=1, max_size=200),
    query=st.dictionaries(st.text(min_size=1, max_size=12), st.text(max_size=20), max_size=3),
    content_type=st.sampled_from(["application/json", "application/json; charset=utf-8"]),
)
def test_any_path_and_query(
    node: NodeThread, route: Route, ids: str, query: dict[str, str], content_type: str
) -> None:
    if route.path.endswith("/output") and "follow" in query:
        query.pop("follow")  # a follow of a run that never ends is the follow tests' matter
    send(
        node, route, b"{}" if route.body else b"", ids=ids,
        query=urllib.parse.urlencode(query), content_type=content_type,
    )  # fmt: skip
    no_errors(node)


def test_depth_at_and_past_the_bound(node: NodeThread) -> None:
    create = next(r for r in ROUTES if r.operation == "createJob")
    assert send(node, create, nested(MAX_DEPTH - 2)) == 400  # the message's own complaint
    assert send(node, create, nested(MAX_DEPTH + 2)) == 400
    assert send(node, create, nested(100_000)) == 400
    no_errors(node)


def test_the_node_still_runs_jobs_afterwards(node: NodeThread, tmp_path: Path) -> None:
    http = HttpApi(node.http_url, owner=OWNER)
    body = {"spec": {"name": "after", "task": {"handler": {"name": "noop"}}}}
    status, created = http.call("POST", "/v1/jobs", body)
    assert status == 202
    run = created["firstRunId"]
    wait_until(
        lambda: http.call("GET", f"/v1/runs/{run}")[1]["state"] == "RUN_STATE_SUCCEEDED",
        what="the run SUCCEEDED",
    )
    no_errors(node)
