"""Authentication where it meets the HTTP/JSON API, the audit log and the quotas: HTTP
calls are judged like gRPC ones (401, 403), every write names its principal in its
audit line (HTTP writes too), and the auth file's ``[quota.*]`` tables are the node's
limits, re-read with the file."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from shardcron.coordinator.auth import AuthFileError, parse_auth_file
from shardcron.coordinator.node import Node
from shardcron.coordinator.open_calls import CallLimits, LongCall
from shardcron.coordinator.quotas import Quotas
from shardcron.v1 import jobs_pb2, jobs_pb2_grpc, types_pb2
from tests.support.auth import OTHER, OWN, TOKENS, auth_file_text, auth_node, bearer
from tests.support.waiting import until

JOB = {
    "spec": {
        "name": "h",
        "task": {"command": {"argv": ["true"]}},
        "schedule": {"kind": "SCHEDULE_KIND_AT", "at": "2099-01-01T00:00:00Z"},
    }
}


JSON_TYPE = "application/json"


def headers(name: str | None, owner: str | None = None) -> dict[str, str]:
    out = {} if name is None else {"authorization": f"Bearer {TOKENS[name]}"}
    if owner is not None:
        out["x-shardcron-owner"] = owner
    return out


async def call(
    node: Node, method: str, path: str, as_: str | None, owner: str | None = None, body: Any = None
) -> tuple[int, Any]:
    url = f"http://127.0.0.1:{node.http_port}{path}"
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, json=body, headers=headers(as_, owner)) as reply,
    ):
        return reply.status, await reply.json()


def audit_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    found = [json.loads(r.getMessage()) for r in caplog.records if r.name == "shardcron.audit"]
    caplog.clear()
    for line in found:
        line.pop("at")
    return found


async def test_http_calls_are_judged_like_grpc_ones(tmp_path: Path) -> None:
    async with auth_node(tmp_path, http=True) as node:
        assert (await call(node, "GET", "/v1/jobs", None))[0] == 401
        status, body = await call(node, "POST", "/v1/jobs", None, body=JOB)
        assert (status, body["code"]) == (401, "UNAUTHENTICATED")
        # a worker's token is for WorkerService only
        assert (await call(node, "GET", "/v1/jobs", "worker"))[0] == 403
        assert (await call(node, "GET", "/v1/jobs", "reader"))[0] == 200
        status, body = await call(node, "POST", "/v1/jobs", "reader", body=JOB)
        assert (status, body["code"]) == (403, "PERMISSION_DENIED")
        status, body = await call(node, "POST", "/v1/jobs", "writer", OTHER, body=JOB)
        assert (status, body["code"]) == (403, "PERMISSION_DENIED")
        status, created = await call(node, "POST", "/v1/jobs", "writer", body=JOB)
        assert status == 202 and created["job"]["owner"] == OWN  # the token's one owner
        job_id = created["job"]["id"]
        assert (await call(node, "GET", f"/v1/jobs/{job_id}", "reader"))[0] == 200
        # acting for another owner, a writer of both and the admin do not find it
        assert (await call(node, "GET", f"/v1/jobs/{job_id}", "writer-ab", OTHER))[0] == 404
        assert (await call(node, "DELETE", f"/v1/jobs/{job_id}", "admin", OTHER))[0] == 404
        # a principal of two owners must name one
        status, body = await call(node, "GET", "/v1/jobs", "writer-ab")
        assert (status, body["field"]) == (400, "x-shardcron-owner")
        assert (await call(node, "GET", "/v1/jobs", "writer-ab", OTHER))[0] == 200
        assert (await call(node, "GET", "/v1/cluster", "reader"))[0] == 200


async def test_openapi_declares_the_bearer_token(tmp_path: Path) -> None:
    async with auth_node(tmp_path, http=True) as node:
        url = f"http://127.0.0.1:{node.http_port}/v1/openapi.json"
        async with aiohttp.ClientSession() as session, session.get(url) as reply:
            document = await reply.json()
    scheme = document["components"]["securitySchemes"]["bearerToken"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert {"bearerToken": []} in document["security"]


async def test_every_write_is_audited_with_its_principal_over_grpc_and_http(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="shardcron.audit")
    async with auth_node(tmp_path, http=True) as node:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{node.port}")
        api = jobs_pb2_grpc.JobServiceStub(channel)
        spec = types_pb2.JobSpec(
            name="g", task=types_pb2.Task(command=types_pb2.CommandTask(argv=["true"]))
        )
        spec.schedule.kind = types_pb2.SCHEDULE_KIND_AT
        spec.schedule.at.FromJsonString("2099-01-01T00:00:00Z")
        created = await api.CreateJob(
            jobs_pb2.CreateJobRequest(spec=spec), metadata=bearer("writer")
        )
        await channel.close()
        [grpc_line] = audit_lines(caplog)
        assert grpc_line == {
            "principal": "writer",
            "owner": OWN,
            "method": "CreateJob",
            "job_ids": [created.job.id],
            "run_ids": [],
            "outcome": "OK",
        }

        status, body = await call(node, "POST", "/v1/jobs", "writer-ab", OTHER, body=JOB)
        assert status == 202
        [http_line] = audit_lines(caplog)
        assert http_line == {
            "principal": "writer-ab",
            "owner": OTHER,
            "method": "CreateJob",
            "job_ids": [body["job"]["id"]],
            "run_ids": [],
            "outcome": "OK",
        }
        # a write that fails after it was authorized is audited with its outcome; the
        # reads a route makes beside its write (ListRuns) are not
        assert (await call(node, "DELETE", "/v1/jobs/nope", "admin", OWN))[0] in (400, 404)
        [failed] = audit_lines(caplog)
        assert (failed["principal"], failed["method"]) == ("admin", "DeleteJob")
        assert failed["outcome"] in ("NOT_FOUND", "INVALID_ARGUMENT")
        # refused for its credential: one refusal line, as over gRPC (test_auth_refusals)
        assert (await call(node, "POST", "/v1/jobs", "reader", body=JOB))[0] == 403
        [refused] = audit_lines(caplog)
        assert (refused["principal"], refused["outcome"]) == ("reader", "PERMISSION_DENIED")
        assert refused["method"] == "/shardcron.v1.JobService/CreateJob"


QUOTA = '\n[quota.default]\nmax_jobs = {n}\n[quota.owner."b"]\nmax_jobs = 5\n'


def test_quota_tables_in_an_auth_file_are_read_and_checked() -> None:
    table = parse_auth_file(auth_file_text() + QUOTA.format(n=1))
    assert table.quotas is not None
    assert table.quotas.for_owner(OWN).max_jobs == 1
    assert table.quotas.for_owner(OTHER).max_jobs == 5
    assert parse_auth_file(auth_file_text()).quotas is None
    with pytest.raises(AuthFileError, match=r"quota.default.max_jobs"):
        parse_auth_file(auth_file_text() + QUOTA.format(n=0))
    with pytest.raises(AuthFileError, match=r"unknown table or key 'quotas'"):
        parse_auth_file(auth_file_text() + "[quotas]\n")


async def test_the_auth_files_quotas_are_in_force_and_follow_a_reload(tmp_path: Path) -> None:
    async with auth_node(tmp_path, http=True, more_toml=QUOTA.format(n=1)) as node:
        assert node.api is not None and node.auth is not None
        assert (await call(node, "POST", "/v1/jobs", "writer", body=JOB))[0] == 202
        status, body = await call(node, "POST", "/v1/jobs", "writer", body=JOB)
        assert (status, body["code"]) == (429, "RESOURCE_EXHAUSTED")
        assert body["message"].startswith("max_jobs")
        # the file now allows 3: a reload (SIGHUP) puts it in force
        (tmp_path / "auth.toml").write_text(auth_file_text() + QUOTA.format(n=3))
        assert node.auth.reload()
        assert node.api.quotas.quotas.for_owner(OWN).max_jobs == 3
        assert (await call(node, "POST", "/v1/jobs", "writer", body=JOB))[0] == 202
        # without quota tables, the node's own (--quota-file's, here the defaults) return
        (tmp_path / "auth.toml").write_text(auth_file_text())
        assert node.auth.reload()
        assert node.api.quotas.quotas == Quotas()


async def test_refused_writes_are_audited_with_their_reason_in_ascii(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="shardcron.audit")
    async with auth_node(tmp_path, http=True) as node:
        url = f"http://127.0.0.1:{node.http_port}/v1/jobs"
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                url, data=b"{not json", headers={**headers("writer"), "content-type": JSON_TYPE}
            ) as reply,
        ):
            assert reply.status == 400
        [bad_body] = audit_lines(caplog)
        assert (bad_body["principal"], bad_body["owner"]) == ("writer", OWN)
        assert (bad_body["method"], bad_body["outcome"]) == ("CreateJob", "INVALID_ARGUMENT")
        assert bad_body["reason"].startswith("body: not JSON")
        # refused while its caller was judged (an owner that is not a name), both edges
        status, _ = await call(node, "POST", "/v1/jobs", "writer-ab", "no such owner!", body=JOB)
        assert status == 400
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{node.port}")
        with pytest.raises(grpc.aio.AioRpcError):
            await jobs_pb2_grpc.JobServiceStub(channel).DeleteJob(
                jobs_pb2.DeleteJobRequest(job_id="j"),
                metadata=(*bearer("writer-ab"), ("x-shardcron-owner", "no such owner!")),
            )
        await channel.close()
        http_line, grpc_line = audit_lines(caplog)
        for line, method in ((http_line, "CreateJob"), (grpc_line, "DeleteJob")):
            assert (line["method"], line["outcome"]) == (method, "INVALID_ARGUMENT")
            assert line["owner"] == "invalid:no such owner!"
            assert line["reason"].startswith("x-shardcron-owner:")
        # an id holding a line separator is escaped: one line, ASCII
        await call(node, "DELETE", "/v1/jobs/a\u2028b\u0085c", "writer")
        [raw] = [r.getMessage() for r in caplog.records if r.name == "shardcron.audit"]
        assert raw.isascii() and "\\u2028" in raw and "\n" not in raw


async def test_an_http_follow_counts_against_its_own_principal(tmp_path: Path) -> None:
    """Over HTTP the servicers saw no caller, so every principal's follows counted as
    "anonymous": one tenant's follows used up everyone's. Each principal has its own."""
    async with auth_node(tmp_path, http=True, call_limits=CallLimits(follows=1)) as node:
        status, created = await call(node, "POST", "/v1/jobs", "writer", body=JOB)
        assert status in (200, 201, 202), created
        output = f"/v1/runs/{created['firstRunId']}/output?follow=true"
        url = f"http://127.0.0.1:{node.http_port}{output}"

        async def follow(name: str) -> int:
            async with (
                aiohttp.ClientSession() as session,
                session.get(url, headers=headers(name, OWN)) as reply,
            ):
                return reply.status

        def following(name: str) -> int:
            return node.open_calls.count(LongCall.FOLLOW, name)

        mine = asyncio.create_task(follow("writer"))
        try:
            await until(lambda: following("writer") == 1, what="the writer's follow")
            refused, body = await call(node, "GET", output, "writer", OWN)
            assert refused == 429 and body["message"].startswith("max_follows: principal writer")
            theirs = asyncio.create_task(follow("writer-ab"))
            await until(lambda: following("writer-ab") == 1, what="another principal's follow")
            theirs.cancel()
        finally:
            mine.cancel()
