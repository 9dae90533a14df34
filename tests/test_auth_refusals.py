"""Refused credentials are audited: every UNAUTHENTICATED or PERMISSION_DENIED call,
gRPC or HTTP, is one ``shardcron.audit`` line naming the method, principal, peer,
code and reason, never the credential; a flood of them costs a bounded number of
lines and a counted SUPPRESSED line, and every one is counted in the metrics."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from shardcron.client.errors import PermissionDenied, Unauthenticated
from shardcron.coordinator.auth import AuthSource, PrincipalDenied, RefusalAudit
from shardcron.coordinator.auth.refusals import peer_host
from shardcron.coordinator.coordination import LocalCoordination
from shardcron.coordinator.node import Node, NodeConfig
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.v1 import jobs_pb2, jobs_pb2_grpc
from tests.support.auth import OTHER, TOKENS, auth_file_text, auth_node, bearer

BAD_TOKEN = "bad-token-3f9a1c77e2d84b06"  # known to no principal
LIST_JOBS = "/shardcron.v1.JobService/ListJobs"
CREATE_JOB = "/shardcron.v1.JobService/CreateJob"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def refusal_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The refusal lines logged since the last call, without ``at``; and no message of
    any logger holds a token."""
    messages = [r.getMessage() for r in caplog.records]
    for secret in (BAD_TOKEN, *TOKENS.values()):
        assert not any(secret in m or secret[:12] in m for m in messages), secret
    found = [json.loads(r.getMessage()) for r in caplog.records if r.name == "shardcron.audit"]
    caplog.clear()
    for line in found:
        assert line.pop("at")
    return [line for line in found if "peer" in line]


def refusals_counted(node: Node, method: str, code: str) -> float:
    value = node.metrics.registry.get_sample_value(
        "shardcron_auth_refusals_total", {"method": method, "code": code}
    )
    return value or 0.0


async def test_grpc_refusals_are_audited_without_the_credential(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with (
        auth_node(tmp_path) as node,
        grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel,
    ):
        api = jobs_pb2_grpc.JobServiceStub(channel)
        owner_b = (*bearer("writer"), ("x-shardcron-owner", OTHER))
        calls = [  # (method, credential metadata, code), called one after another
            (api.ListJobs, (), "UNAUTHENTICATED"),
            (api.ListJobs, (("authorization", f"Bearer {BAD_TOKEN}"),), "UNAUTHENTICATED"),
            (api.CreateJob, bearer("reader"), "PERMISSION_DENIED"),
            (api.ListJobs, owner_b, "PERMISSION_DENIED"),
        ]
        for method, metadata, code in calls:
            request = (
                jobs_pb2.CreateJobRequest()
                if method is api.CreateJob
                else jobs_pb2.ListJobsRequest()
            )
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await method(request, metadata=metadata)
            assert raised.value.code().name == code
        assert refusal_lines(caplog) == [
            {
                "principal": "anonymous",
                "method": LIST_JOBS,
                "peer": "127.0.0.1",
                "outcome": "UNAUTHENTICATED",
                "reason": "no credential: send 'authorization: Bearer TOKEN' (--token,"
                " SHARDCRON_TOKEN) or a client certificate",
            },
            {
                "principal": "anonymous",
                "method": LIST_JOBS,
                "peer": "127.0.0.1",
                "outcome": "UNAUTHENTICATED",
                "reason": "the bearer token is not known to this node",
            },
            {
                "principal": "reader",
                "method": CREATE_JOB,
                "peer": "127.0.0.1",
                "outcome": "PERMISSION_DENIED",
                "reason": f"principal reader (role reader) may not call {CREATE_JOB}",
            },
            {
                "principal": "writer",
                "method": LIST_JOBS,
                "peer": "127.0.0.1",
                "outcome": "PERMISSION_DENIED",
                "reason": f"principal writer may not act for owner {OTHER}",
            },
        ]
        assert refusals_counted(node, LIST_JOBS, "UNAUTHENTICATED") == 2
        assert refusals_counted(node, CREATE_JOB, "PERMISSION_DENIED") == 1
        assert refusals_counted(node, LIST_JOBS, "PERMISSION_DENIED") == 1


async def test_http_refusals_are_audited_as_the_method_the_route_serves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with auth_node(tmp_path, http=True) as node, aiohttp.ClientSession() as session:
        base = f"http://127.0.0.1:{node.http_port}"
        sent = [
            ({"authorization": f"Bearer {BAD_TOKEN}"}, 401),
            ({"authorization": f"Bearer {TOKENS['writer']}", "x-shardcron-owner": OTHER}, 403),
        ]
        for headers, status in sent:
            async with session.get(f"{base}/v1/jobs", headers=headers) as reply:
                assert reply.status == status
        async with session.post(
            f"{base}/v1/jobs", json={}, headers={"authorization": f"Bearer {TOKENS['reader']}"}
        ) as reply:
            assert reply.status == 403
        lines = refusal_lines(caplog)
        assert [(x["principal"], x["method"], x["peer"], x["outcome"]) for x in lines] == [
            ("anonymous", LIST_JOBS, "127.0.0.1", "UNAUTHENTICATED"),
            ("writer", LIST_JOBS, "127.0.0.1", "PERMISSION_DENIED"),
            ("reader", CREATE_JOB, "127.0.0.1", "PERMISSION_DENIED"),
        ]
        assert lines[0]["reason"] == "the bearer token is not known to this node"
        assert refusals_counted(node, LIST_JOBS, "UNAUTHENTICATED") == 1


async def test_a_flood_of_bad_tokens_logs_a_bounded_number_of_lines_and_counts_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    (tmp_path / "auth.toml").write_text(auth_file_text())
    auth = AuthSource(tmp_path / "auth.toml")
    clock = FakeClock()
    auth.refusals = RefusalAudit(lines_per_window=10, window=1.0, clock=clock)
    store = SqliteStore(tmp_path / "shardcron.db", shard_count=4)
    coordination = LocalCoordination(tmp_path, shard_count=4, node_id="n")
    node = Node(store, coordination, NodeConfig(listen="127.0.0.1:0", node_id="n"), auth=auth)
    await node.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel:
            api = jobs_pb2_grpc.JobServiceStub(channel)
            bad = (("authorization", f"Bearer {BAD_TOKEN}"),)

            async def hammer(times: int) -> None:
                for _ in range(times):
                    with pytest.raises(grpc.aio.AioRpcError):
                        await api.ListJobs(jobs_pb2.ListJobsRequest(), metadata=bad)

            await hammer(50)
            lines = refusal_lines(caplog)
            assert len(lines) == 10
            assert {x["outcome"] for x in lines} == {"UNAUTHENTICATED"}
            assert refusals_counted(node, LIST_JOBS, "UNAUTHENTICATED") == 50
            clock.now += 1.0  # the window is over: the next refusal reports the rest
            await hammer(1)
            summary, first_of_next = refusal_lines(caplog)
            assert summary["outcome"] == "SUPPRESSED"
            assert summary["suppressed"] == 40
            assert summary["peer"] == "127.0.0.1"
            assert first_of_next["outcome"] == "UNAUTHENTICATED"
    finally:
        await node.stop(0)


def test_each_host_has_its_own_budget_and_the_hosts_past_the_bound_share_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    clock = FakeClock()
    audit = RefusalAudit(lines_per_window=2, window=1.0, max_peers=2, clock=clock)
    counted: list[tuple[str, str]] = []
    audit.count_into(lambda method, code: counted.append((method, code)))
    error = Unauthenticated("the bearer token is not known to this node")
    for peer in ("ipv4:10.0.0.1:1", "ipv4:10.0.0.1:2", "ipv4:10.0.0.1:3", "ipv6:[::1]:4"):
        audit.refused(method=LIST_JOBS, peer=peer, error=error)
    for peer in ("10.0.0.3", "10.0.0.4", "10.0.0.5"):  # past max_peers: one budget
        audit.refused(method=LIST_JOBS, peer=peer, error=error)
    lines = refusal_lines(caplog)
    assert [x["peer"] for x in lines] == ["10.0.0.1", "10.0.0.1", "[::1]", "10.0.0.3", "10.0.0.4"]
    assert len(counted) == 7
    clock.now += 1.0
    audit.flush()  # the window ended with no refusal after it: the summaries come out
    assert [(x["peer"], x["suppressed"]) for x in refusal_lines(caplog)] == [
        ("10.0.0.1", 1),
        ("*", 1),
    ]
    audit.refused(method=CREATE_JOB, peer="10.0.0.9", error=PrincipalDenied("bob", "no"))
    audit.refused(method=CREATE_JOB, peer="10.0.0.9", error=PermissionDenied("closed"))
    assert [x["principal"] for x in refusal_lines(caplog)] == ["bob", "anonymous"]


def test_peer_host_drops_the_scheme_and_the_port() -> None:
    assert peer_host("ipv4:127.0.0.1:51234") == "127.0.0.1"
    assert peer_host("ipv6:[::1]:51234") == "[::1]"
    assert peer_host("10.0.0.5") == "10.0.0.5"
    assert peer_host("unix:/tmp/s") == "unix:/tmp/s"
    assert peer_host(None) == "unknown"
