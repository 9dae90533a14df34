"""Per-owner quotas: the TOML form, the token bucket, and the refusals a real node sends
(RESOURCE_EXHAUSTED naming the limit, nothing written)."""

from __future__ import annotations

import asyncio
import json
import logging
import tomllib
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from shardcron.client.errors import ResourceExhausted
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.quotas import (
    DEFAULT_QUOTA,
    Quota,
    QuotaFileError,
    QuotaGuard,
    Quotas,
    TokenBucket,
    quotas_from_toml,
)
from shardcron.v1 import jobs_pb2, jobs_pb2_grpc, types_pb2
from tests.support.local_node import started_node

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


def guard_over(quota: Quota) -> tuple[QuotaGuard, dict[str, int], list[float]]:
    """A guard of ``quota`` for every owner, the store's job counts it reads (none
    until set) and its clock (``now[0]``: move it)."""
    now = [0.0]
    jobs = {"a": 0}

    async def count(owner: str) -> int:
        return jobs.get(owner, 0)

    return QuotaGuard(Quotas(default=quota), count, clock=lambda: now[0]), jobs, now


async def test_the_guard_refuses_by_rate_then_by_job_count() -> None:
    quota = Quota(max_jobs=3, creates_per_second=1.0, burst=2, max_request_bytes=100)
    guard, jobs, now = guard_over(quota)
    with pytest.raises(ResourceExhausted, match="^creates_per_second: 3 creates in one call"):
        await guard.check_creates("a", 3)
    await guard.check_creates("a", 2)
    with pytest.raises(ResourceExhausted, match="^creates_per_second:"):
        await guard.check_creates("a", 1)
    jobs["a"] = 2
    guard.creates_ended("a", 2, 0)  # written: the store's count holds them now
    now[0] = 5.0
    with pytest.raises(ResourceExhausted, match="^max_jobs: owner a has 2 jobs and may have 3"):
        await guard.check_creates("a", 2)
    await guard.check_creates("a", 1)  # the refused call gave its tokens back
    with pytest.raises(ResourceExhausted, match="^max_request_bytes:"):
        guard.check_request("a", 101)
    guard.check_request("a", 100)


async def test_a_reservation_counts_until_written_and_what_was_not_made_goes_back() -> None:
    """Creates reserved and not yet written count even when the count is read again
    (the store does not hold them yet); those not made leave the count; no owner's lock
    outlives its checks."""
    quota = Quota(max_jobs=3, creates_per_second=100.0, burst=100, max_request_bytes=100)
    guard, stored, now = guard_over(quota)
    await guard.check_creates("a", 2)
    now[0] = 5.0  # the count is read again: 0 stored + 2 being written
    with pytest.raises(ResourceExhausted, match="^max_jobs: owner a has 2 jobs"):
        await guard.check_creates("a", 2)
    await guard.check_creates("a", 1)
    guard.creates_ended("a", 1, 1)  # its create failed before its write
    guard.creates_ended("a", 2, 1)  # one of the two replayed an idempotency key
    stored["a"] = 1
    await guard.check_creates("a", 2)  # 1 held: 2 more fit
    assert len(guard._locks) == 0


def spec(name: str = "j", *, payload: bytes = b"") -> types_pb2.JobSpec:
    handler = types_pb2.HandlerTask(name="noop", payload=payload)
    out = types_pb2.JobSpec(name=name, task=types_pb2.Task(handler=handler))
    out.schedule.kind = types_pb2.SCHEDULE_KIND_AT  # not due while the test runs
    out.schedule.at.FromDatetime(utcnow() + timedelta(days=1))
    return out


async def create_as(api: jobs_pb2_grpc.JobServiceStub, owner: str, s: types_pb2.JobSpec) -> str:
    """ "OK", or the message of the RESOURCE_EXHAUSTED that refused the create."""
    try:
        req = jobs_pb2.CreateJobRequest(spec=s)
        await api.CreateJob(req, metadata=(("x-shardcron-owner", owner),))
    except grpc.aio.AioRpcError as e:
        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.details()
        return e.details()
    return "OK"


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
    async with (
        started_node(tmp_path, "n1", quotas=quotas) as node,
        grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel,
    ):
        api = jobs_pb2_grpc.JobServiceStub(channel)

        async def create(owner: str, s: types_pb2.JobSpec) -> str:
            return (await create_as(api, owner, s)).partition(":")[0]

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
    outcomes = [
        json.loads(r.getMessage())["outcome"] for r in caplog.records if r.name == "shardcron.audit"
    ]
    assert outcomes.count("RESOURCE_EXHAUSTED") == 3


async def test_the_guard_forgets_idle_owners_past_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shardcron.coordinator import quotas as quotas_module

    monkeypatch.setattr(quotas_module, "MAX_TRACKED_OWNERS", 3)
    quota = Quota(max_jobs=10, creates_per_second=1.0, burst=1, max_request_bytes=100)
    guard, _, now = guard_over(quota)
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


async def test_concurrent_creates_never_pass_max_jobs_on_one_node(tmp_path: Path) -> None:
    """Issue 32: concurrent CreateJobs of one owner all read the job count before any
    was counted, so a limit of 5 let 11 jobs in. Exactly 5 are made; the rest are
    refused naming max_jobs, and another owner's creates go on meanwhile."""
    quotas = quotas_from_toml(tomllib.loads('[quota.owner."a"]\nmax_jobs = 5\n'))
    async with (
        started_node(tmp_path, "n1", quotas=quotas) as node,
        grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel,
    ):
        api = jobs_pb2_grpc.JobServiceStub(channel)
        outcomes = await asyncio.gather(
            *(create_as(api, "a", spec(f"a{i}")) for i in range(40)),
            *(create_as(api, "b", spec(f"b{i}")) for i in range(5)),
        )
        mine, others = outcomes[:40], outcomes[40:]
        assert mine.count("OK") == 5
        assert all(o.startswith("max_jobs: owner a") for o in mine if o != "OK")
        assert others == ["OK"] * 5
        assert await node.store.count_jobs("a") == 5
        # and it stays refused once the count is read from the store again
        assert (await create_as(api, "a", spec())).startswith("max_jobs")
