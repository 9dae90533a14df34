"""The create path's lean forms: ``CreateJobs`` with ``ids_only`` answers with ids alone
and stores exactly what the full form stores; a batch of one spec is read, checked and
encoded once, and still names the first bad job; the codec's fast time and message
encoders give the same bytes as protobuf's own helpers."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import pytest_asyncio
from google.protobuf.timestamp_pb2 import Timestamp

from shardcron.client import AsyncClient
from shardcron.client.codec.common import get_time, set_time
from shardcron.client.codec.jobs import job_spec_to_proto, job_specs_from_proto
from shardcron.client.errors import InvalidArgument
from shardcron.client.types import HandlerTask, JobSpec, Schedule
from shardcron.coordinator.node import Node
from shardcron.v1 import types_pb2
from tests.support.local_node import sqlite_node


@pytest_asyncio.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = sqlite_node(tmp_path, "lean")
    await n.start()
    try:
        yield n
    finally:
        await n.stop()


async def test_ids_only_answers_ids_in_order_of_jobs_stored_as_in_full(node: Node) -> None:
    at = datetime.now(UTC) + timedelta(hours=1)
    specs = [
        JobSpec(name=f"j{i}", task=HandlerTask(name="noop"), schedule=Schedule.once_at(at))
        for i in range(5)
    ]
    client = AsyncClient(f"127.0.0.1:{node.port}", owner="lean")
    try:
        ids = await client.create_job_ids(specs)
        full = await client.create_jobs(specs)
        assert len(set(ids)) == 5
        for job_id, spec, twin in zip(ids, specs, full, strict=True):
            stored = await client.get_job(job_id)
            assert stored.spec == spec == twin.spec
            assert (stored.state, stored.next_fire_at) == (twin.state, twin.next_fire_at)
    finally:
        await client.close()


async def test_ids_only_with_a_known_key_answers_the_existing_job(node: Node) -> None:
    spec = JobSpec(name="keyed", task=HandlerTask(name="noop"))
    client = AsyncClient(f"127.0.0.1:{node.port}", owner="lean")
    try:
        [first] = await client.create_job_ids([(spec, "k1")])
        [again, other] = await client.create_job_ids([(spec, "k1"), (spec, "k2")])
        assert again == first and other != first
    finally:
        await client.close()


def test_set_time_gives_protobufs_bytes() -> None:
    rng = random.Random(7)
    plus5 = timezone(timedelta(hours=5))
    values = [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 1),  # naive reads as UTC
        datetime(2026, 3, 29, 1, 30, 0, 5, tzinfo=plus5),
    ] + [datetime.fromtimestamp(rng.uniform(-6e10, 2.5e11), UTC) for _ in range(500)]
    for value in values:
        ours, theirs = types_pb2.Job(), Timestamp()
        set_time(ours, "created_at", value)
        theirs.FromDatetime(value)
        assert ours.created_at == theirs, value


def test_get_time_gives_protobufs_datetimes() -> None:
    rng = random.Random(8)
    pairs = [(-62_135_596_800, 0), (253_402_300_799, 999_999_999), (-1, 999_999_999)]
    pairs += [(rng.randint(-62_135_596_800, 253_402_300_799), rng.randint(0, 10**9 - 1))]
    for seconds, nanos in pairs * 50:
        msg = types_pb2.Job()
        msg.created_at.seconds, msg.created_at.nanos = seconds, nanos
        assert get_time(msg, "created_at", "") == msg.created_at.ToDatetime(tzinfo=UTC)


def test_a_value_protobuf_cannot_hold_still_names_its_field() -> None:
    spec = JobSpec(name="big", task=HandlerTask(name="noop"), priority=1 << 40)
    with pytest.raises(InvalidArgument) as e:
        job_spec_to_proto(spec, "jobs[3].spec")
    assert e.value.field == "jobs[3].spec.priority"


def test_a_batch_of_one_spec_is_read_once_and_errors_name_the_first_bad_job() -> None:
    good = job_spec_to_proto(JobSpec(name="same", task=HandlerTask(name="noop")))
    other = job_spec_to_proto(JobSpec(name="other", task=HandlerTask(name="noop")))
    specs = job_specs_from_proto([good, other, good], "jobs[{}].spec")
    assert specs[0] is specs[2] and specs[0] is not specs[1]
    assert [s.name for s in specs] == ["same", "other", "same"]
    bad = types_pb2.JobSpec(name="no-task")
    with pytest.raises(InvalidArgument) as raised:
        job_specs_from_proto([good, bad, bad], "jobs[{}].spec")
    assert raised.value.field == "jobs[1].spec.task"


async def test_jobs_sharing_one_spec_are_each_stored_and_checked_where_they_differ(
    node: Node,
) -> None:
    spec = JobSpec(name="shared", task=HandlerTask(name="noop"))
    bad = JobSpec(name="shared", task=HandlerTask(name="noop"), priority=10**6 + 1)
    client = AsyncClient(f"127.0.0.1:{node.port}", owner="lean")
    try:
        ids = await client.create_job_ids([spec] * 3)
        assert len(set(ids)) == 3
        for job_id in ids:
            assert (await client.get_job(job_id)).spec == spec
        with pytest.raises(InvalidArgument) as raised:
            await client.create_job_ids([spec, bad, spec])
        assert raised.value.field == "jobs[1].spec.priority"
    finally:
        await client.close()
