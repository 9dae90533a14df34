"""Per-owner quotas: the TOML form, the token bucket, and the refusals a real node sends
(RESOURCE_EXHAUSTED naming the limit, nothing written)."""

from __future__ import annotations

import json
import logging
import tomllib
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from shardcron.client.errors import ResourceExhausted
from shardcron.coordinator.coordination import LocalCoordination
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.node import Node, NodeConfig
from shardcron.coordinator.quotas import (
    DEFAULT_QUOTA,
    Quota,
    QuotaFileError,
    QuotaGuard,
    Quotas,
    TokenBucket,
    quotas_from_toml,
)
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.v1 import jobs_pb2, jobs_pb2_grpc, types_pb2

EXAMPLE = """
[quota.default]          # every owner without its own limits
max_jobs = 100000
creates_per_second = 200
max_request_bytes = 4194304
[quota.owner."team-a"]   # per owner
max_jobs = 500
creates_per_second = 20
"""


def test_the_documented_form_reads_as_written() -> None:
    quotas = quotas_from_toml(tomllib.loads(EXAMPLE))
    default = Quota(max_jobs=100_000, creates_per_second=200, burst=200, max_request_bytes=4 << 20)
    assert quotas.default == default
    assert quotas.for_owner("team-a") == Quota(
        max_jobs=500, creates_per_second=20, burst=20, max_request_bytes=4 << 20
    )
    assert quotas.for_owner("anyone-else") == default
    assert quotas_from_toml({}) == Quotas() and Quotas().default == DEFAULT_QUOTA


@pytest.mark.parametrize(
    ("document", "named"),
    [
        ("[quota.default]\nmax_jobs = -1", "quota.default.max_jobs"),
        ("[quota.default]\nmax_jobs = 1.5", "quota.default.max_jobs"),
        ('[quota.owner."a"]\ncreates_per_second = "fast"', 'quota.owner."a".creates_per_second'),
        ('[quota.owner."a"]\nmax_job = 3', 'quota.owner."a": unknown key'),
        ("[quota.defaults]\nmax_jobs = 3", "quota: unknown table"),
    ],
)
def test_a_bad_value_is_refused_naming_its_table_and_key(document: str, named: str) -> None:
    with pytest.raises(QuotaFileError, match=named.replace(".", r"\.")):
        quotas_from_toml(tomllib.loads(document))


def test_the_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    bucket = TokenBucket(rate=2.0, burst=4, tokens=4, at=0.0)
    assert bucket.take(4, now=0.0)
    assert not bucket.take(1, now=0.0)
    assert not bucket.take(2, now=0.9)  # 1.8 tokens: not yet
    assert bucket.take(2, now=1.0)  # exactly 2 at 1 s
    assert not bucket.take(5, now=100.0)  # never more than the burst
    assert bucket.take(4, now=100.0)


async def test_the_guard_refuses_by_rate_then_by_job_count() -> None:
    now = [0.0]
    jobs = {"a": 0}

    async def count(owner: str) -> int:
        return jobs[owner]

    quota = Quota(max_jobs=3, creates_per_second=1.0, burst=2, max_request_bytes=100)
    guard = QuotaGuard(Quotas(default=quota), count, clock=lambda: now[0])
    with pytest.raises(ResourceExhausted, match="^creates_per_second: 3 creates in one call"):
        await guard.check_creates("a", 3)
    await guard.check_creates("a", 2)
    with pytest.raises(ResourceExhausted, match="^creates_per_second:"):
        await guard.check_creates("a", 1)
    jobs["a"] = 2
    now[0] = 5.0
    with pytest.raises(ResourceExhausted, match="^max_jobs: owner a has 2 jobs and may have 3"):
        await guard.check_creates("a", 2)
    await guard.check_creates("a", 1)  # the refused call gave its tokens back
    with pytest.raises(ResourceExhausted, match="^max_request_bytes:"):
        guard.check_request("a", 101)
    guard.check_request("a", 100)


def spec(name: str = "j", *, payload: bytes = b"") -> types_pb2.JobSpec:
    handler = types_pb2.HandlerTask(name="noop", payload=payload)
    out = types_pb2.JobSpec(name=name, task=types_pb2.Task(handler=handler))
    out.schedule.kind = types_pb2.SCHEDULE_KIND_AT  # not due while the test runs
    out.schedule.at.FromDatetime(utcnow() + timedelta(days=1))
    return out


async def test_a_node_refuses_past_a_quota_with_resource_exhausted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="shardcron.audit")
    quotas = quotas_from_toml(
        tomllib.loads(
            '[quota.owner."small"]\nmax_jobs = 2\nmax_request_bytes = 2000\n'
            '[quota.owner."slow"]\ncreates_per_second = 0.001\nburst = 2\n'
        )
    )
    store = SqliteStore(tmp_path / "shardcron.db", shard_count=8)
    coordination = LocalCoordination(tmp_path, shard_count=8, node_id="n1")
    node = Node(store, coordination, NodeConfig(listen="127.0.0.1:0", node_id="n1", quotas=quotas))
    await node.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{node.port}")
    api = jobs_pb2_grpc.JobServiceStub(channel)

    async def create(owner: str, s: types_pb2.JobSpec) -> str:
        try:
            req = jobs_pb2.CreateJobRequest(spec=s)
            await api.CreateJob(req, metadata=(("x-shardcron-owner", owner),))
        except grpc.aio.AioRpcError as e:
            assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            return e.details().partition(":")[0]
        return "OK"

    try:
        assert [await create("small", spec()) for _ in range(3)] == ["OK", "OK", "max_jobs"]
        assert [await create("slow", spec()) for _ in range(3)] == [
            "OK",
            "OK",
            "creates_per_second",
        ]
        assert await create("small", spec(payload=b"x" * 3000)) == "max_request_bytes"
        assert await create("other", spec(payload=b"x" * 3000)) == "OK"
        listed = await api.ListJobs(
            jobs_pb2.ListJobsRequest(), metadata=(("x-shardcron-owner", "small"),)
        )
        assert len(listed.jobs) == 2  # the refusals wrote nothing
    finally:
        await channel.close()
        await node.stop()
    outcomes = [
        json.loads(r.getMessage())["outcome"] for r in caplog.records if r.name == "shardcron.audit"
    ]
    assert outcomes.count("RESOURCE_EXHAUSTED") == 3


async def test_the_guard_forgets_idle_owners_past_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shardcron.coordinator import quotas as quotas_module

    monkeypatch.setattr(quotas_module, "MAX_TRACKED_OWNERS", 3)
    now = [0.0]

    async def none(owner: str) -> int:
        return 0

    quota = Quota(max_jobs=10, creates_per_second=1.0, burst=1, max_request_bytes=100)
    guard = QuotaGuard(Quotas(default=quota), none, clock=lambda: now[0])
    for owner in ("a", "b", "c"):
        await guard.check_creates(owner, 1)  # each bucket now empty, full again at 1 s
    now[0] = 0.5
    await guard.check_creates("d", 1)  # none idle yet: over the bound, all forgotten
    assert set(guard._buckets) == {"d"}
    now[0] = 10.0
    for owner in ("e", "f"):
        await guard.check_creates(owner, 1)
    await guard.check_creates("g", 1)  # d, e, f: d is full again, forgotten
    assert set(guard._buckets) == {"e", "f", "g"}
