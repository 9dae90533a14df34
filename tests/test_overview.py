"""The overview's parts: a poller's per-owner history (fed where a run ends), the merge
of every poller's part, and the codec between nodes."""

from __future__ import annotations

import dataclasses
import socket
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

from shardcron.client import codec
from shardcron.client.errors import InvalidArgument
from shardcron.client.overview import (
    LAG_BOUNDS,
    LAG_BUCKETS,
    FailingJob,
    OverviewBucket,
    OverviewPart,
    OverviewWindow,
    lag_bucket,
    lag_quantile,
    merge,
    window_starts,
)
from shardcron.client.types import (
    HandlerTask,
    Job,
    JobSpec,
    JobState,
    RetryPolicy,
    Run,
    RunReason,
    RunState,
)
from shardcron.coordinator.coordination import ClusterView, Member
from shardcron.coordinator.overviews import read_overview
from shardcron.coordinator.poller import history as history_module
from shardcron.coordinator.poller.end_rules import Outcome
from shardcron.coordinator.poller.history import FAILING_PER_OWNER, RunHistory
from shardcron.coordinator.router import PollerServiceServicer, ShardRouter
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import NewJob
from shardcron.v1 import cluster_pb2, cluster_pb2_grpc
from tests.support.held_runs import Held
from tests.support.store_builders import ALICE, BOB, make_job

NOW = datetime(2030, 1, 1, 12, 30, 20, tzinfo=UTC)
M = timedelta(minutes=1)
HOUR = OverviewWindow.HOUR


def job(owner: str = "o", name: str = "nightly", job_id: str = "j1") -> Job:
    spec = JobSpec(name=name, task=HandlerTask(name="h"), retry=RetryPolicy(max_attempts=1))
    return Job(
        id=job_id, owner=owner, spec=spec, state=JobState.ACTIVE, version=1,
        created_at=NOW, updated_at=NOW,
    )  # fmt: skip


def ended(
    state: RunState,
    *,
    at: datetime = NOW,
    lag: float | None = 0.02,
    owner: str = "o",
    run_id: str = "r",
) -> Run:
    due = at - timedelta(seconds=5)
    return Run(
        id=run_id, job_id="j1", owner=owner, fire_key="f", fire_at=due, due_at=due,
        state=state, started_at=None if lag is None else due + timedelta(seconds=lag),
        ended_at=at, reason=RunReason.NON_ZERO_EXIT if state is RunState.FAILED else RunReason.NONE,
    )  # fmt: skip


def test_runs_ended_are_counted_by_minute_and_outcome_and_owners_keep_apart() -> None:
    history = RunHistory(since=NOW - timedelta(hours=2))
    history.ended(ended(RunState.SUCCEEDED), NOW)
    history.ended(ended(RunState.SUCCEEDED, lag=3.0), NOW)
    history.ended(ended(RunState.FAILED, at=NOW - 2 * M), NOW)
    history.ended(ended(RunState.TIMED_OUT, at=NOW - 2 * M), NOW)
    history.ended(ended(RunState.CANCELLED, lag=None), NOW)
    history.ended(ended(RunState.MISSED, lag=None, owner="other"), NOW)
    part = history.part("o", HOUR, NOW, running=2, waiting={"no worker": 1})
    assert [(b.start.minute, b.succeeded, b.failed, b.other) for b in part.buckets] == [
        (28, 0, 2, 0),
        (30, 2, 0, 1),
    ]
    assert part.running == 2 and part.waiting == {"no worker": 1}
    assert part.since == NOW - timedelta(hours=2)
    last = part.buckets[-1]
    assert last.lag_counts[lag_bucket(0.02)] == 1 and last.lag_counts[lag_bucket(3.0)] == 1
    assert last.lag_p50 == 0.025 and last.lag_p99 == 5.0
    other = history.part("other", HOUR, NOW, running=0, waiting={})
    assert [(b.failed, sum(b.lag_counts)) for b in other.buckets] == [(1, 0)]


def test_a_day_window_sums_ten_minutes_a_bucket_and_nothing_older_than_a_day_is_kept() -> None:
    history = RunHistory(since=NOW - timedelta(days=2))
    for minutes in (0, 3, 9, 11, 23 * 60 + 50, 24 * 60 + 5):
        history.ended(ended(RunState.SUCCEEDED, at=NOW - minutes * M), NOW)
    day = history.part("o", OverviewWindow.DAY, NOW, running=0, waiting={})
    starts = window_starts(OverviewWindow.DAY, NOW)
    assert len(starts) == 144 and starts[-1] == datetime(2030, 1, 1, 12, 30, tzinfo=UTC)
    assert [(b.start, b.succeeded) for b in day.buckets] == [
        (datetime(2030, 1, 1, 12, 40, tzinfo=UTC) - timedelta(days=1), 1),
        (datetime(2030, 1, 1, 12, 10, tzinfo=UTC), 1),
        (datetime(2030, 1, 1, 12, 20, tzinfo=UTC), 2),
        (datetime(2030, 1, 1, 12, 30, tzinfo=UTC), 1),
    ]
    hour = history.part("o", HOUR, NOW, running=0, waiting={})
    assert sum(b.succeeded for b in hour.buckets) == 4


def test_failing_jobs_come_with_a_failure_and_go_with_a_success_within_a_bound() -> None:
    history = RunHistory(since=NOW)
    history.job_ended(job(), ended(RunState.FAILED, run_id="r1"), 1)
    history.job_ended(job(), ended(RunState.FAILED, run_id="r2"), 2)
    [failing] = history.part("o", HOUR, NOW, running=0, waiting={}).failing_jobs
    assert (failing.job_id, failing.consecutive_failures, failing.run_id) == ("j1", 2, "r2")
    assert failing.reason is RunReason.NON_ZERO_EXIT
    history.job_ended(job(), ended(RunState.CANCELLED), 2)  # says nothing of its health
    assert len(history.part("o", HOUR, NOW, running=0, waiting={}).failing_jobs) == 1
    history.job_ended(job(), ended(RunState.SUCCEEDED), 0)
    assert history.part("o", HOUR, NOW, running=0, waiting={}).failing_jobs == ()
    for i in range(FAILING_PER_OWNER + 5):
        history.job_ended(job(job_id=f"j{i}"), ended(RunState.FAILED), 1 + (i % 7))
    failing_now = history.part("o", HOUR, NOW, running=0, waiting={}).failing_jobs
    assert len(failing_now) == FAILING_PER_OWNER
    streaks = [j.consecutive_failures for j in failing_now]
    assert streaks.count(1) == 15 - 5  # the shortest streaks gave way, only they
    assert len([s for s in streaks if s > 1]) == 90


def test_a_run_ended_by_the_poller_rules_feeds_the_history_with_its_jobs_streak() -> None:
    held = Held()
    j = job(owner="o")
    for n in (1, 2):
        stored = dataclasses.replace(j, consecutive_failures=n - 1)  # as the last end left it
        slot = held.slot(stored, owner="o")
        outcome = Outcome(
            state=RunState.FAILED, reason=RunReason.NON_ZERO_EXIT, exit_code=3,
            error="exit code 3", started_at=NOW - M, ended_at=NOW,
        )  # fmt: skip
        held.ends.end(slot, outcome, held.turn, NOW)
    part = held.ends.history.part("o", HOUR, NOW, running=0, waiting={})
    # ended in NOW's minute; started (lag counted) in the one before
    assert [(b.failed, sum(b.lag_counts)) for b in part.buckets] == [(0, 2), (2, 0)]
    [failing] = part.failing_jobs
    assert (failing.name, failing.consecutive_failures, failing.error) == (
        "nightly",
        2,
        "exit code 3",
    )


def test_parts_merge_into_every_bucket_of_the_window_with_quantiles_of_the_sums() -> None:
    starts = window_starts(HOUR, NOW)
    assert len(starts) == 60 and starts[-1] == datetime(2030, 1, 1, 12, 30, tzinfo=UTC)
    fast = [0] * LAG_BUCKETS
    fast[0] = 99
    slow = [0] * LAG_BUCKETS
    slow[lag_bucket(30.0)] = 3
    a = OverviewPart(
        running=1, waiting={"no worker": 2},
        buckets=(OverviewBucket(start=starts[-1], succeeded=99, lag_counts=tuple(fast)),),
        failing_jobs=(failing_job("j1", 3, NOW - M),), since=NOW - timedelta(hours=3),
    )  # fmt: skip
    b = OverviewPart(
        running=2, waiting={"no worker": 1, "waiting for a free slot": 4},
        buckets=(
            OverviewBucket(start=starts[-1], failed=3, lag_counts=tuple(slow)),
            OverviewBucket(start=starts[0] - M, failed=50),  # before the window
        ),
        failing_jobs=(failing_job("j1", 4, NOW), failing_job("j2", 9, NOW)),
        since=NOW - timedelta(minutes=10),
    )  # fmt: skip
    overview = merge([a, b], HOUR, starts)
    assert len(overview.buckets) == 60
    last = overview.buckets[-1]
    assert (last.succeeded, last.failed) == (99, 3)
    assert last.lag_p50 == LAG_BOUNDS[0] and last.lag_p99 == 30.0
    assert overview.failed_last_hour == 3
    assert overview.running == 3
    assert overview.waiting == {"no worker": 3, "waiting for a free slot": 4}
    assert [(j.job_id, j.consecutive_failures) for j in overview.failing_jobs] == [
        ("j2", 9),
        ("j1", 4),
    ]
    assert overview.since == NOW - timedelta(minutes=10)  # counts before it are lost
    assert overview.parts == 2


def failing_job(job_id: str, streak: int, at: datetime) -> FailingJob:
    return FailingJob(
        job_id=job_id, name=job_id, consecutive_failures=streak, state=RunState.FAILED,
        reason=RunReason.NON_ZERO_EXIT, error="", ended_at=at, run_id="r",
    )  # fmt: skip


def test_lag_quantiles_read_the_upper_bound_of_their_bucket() -> None:
    assert lag_quantile([0] * LAG_BUCKETS, 0.5) is None
    counts = [0] * LAG_BUCKETS
    counts[-1] = 1  # above the last bound: read as the last bound
    assert lag_quantile(counts, 0.99) == LAG_BOUNDS[-1]
    assert lag_bucket(0.0) == 0 and lag_bucket(1e9) == LAG_BUCKETS - 1


def test_a_part_crosses_between_nodes_whole_and_a_malformed_one_names_its_field() -> None:
    counts = tuple(range(LAG_BUCKETS))
    part = OverviewPart(
        running=4, waiting={"no worker": 2},
        buckets=(OverviewBucket(start=NOW.replace(second=0), succeeded=1, failed=2, other=3, lag_counts=counts),),
        failing_jobs=(failing_job("j1", 2, NOW),), since=NOW,
    )  # fmt: skip
    assert codec.overview_part_from_proto(codec.overview_part_to_proto(part)) == part
    wire = codec.overview_part_to_proto(part)
    del wire.buckets[0].lag_counts[3:]
    with pytest.raises(InvalidArgument) as bad:
        codec.overview_part_from_proto(wire)
    assert bad.value.field == "part.buckets[0].lag_counts"
    with pytest.raises(InvalidArgument) as window:
        codec.overview_window_from_proto(9)
    assert window.value.field == "window"


def test_the_callers_overview_carries_quantiles_not_counts() -> None:
    starts = window_starts(HOUR, NOW)
    counts = [0] * LAG_BUCKETS
    counts[2] = 10
    part = OverviewPart(
        buckets=(OverviewBucket(start=starts[-1], succeeded=10, lag_counts=tuple(counts)),)
    )
    msg = codec.overview_to_proto(merge([part], HOUR, starts))
    assert len(msg.buckets) == 60 and msg.bucket_seconds == 60
    assert not msg.buckets[-1].lag_counts
    assert msg.buckets[-1].lag_p50_seconds == LAG_BOUNDS[2]
    assert not msg.buckets[0].HasField("lag_p50_seconds")  # no run started then
    assert not msg.HasField("history_since")


class Pollers:
    """The cluster as a node's coordination shows it: these pollers at these addresses
    (only what ``ShardRouter`` reads of a ``Coordination``)."""

    def __init__(self, addresses: dict[str, str]) -> None:
        self.addresses = addresses

    async def view(self) -> ClusterView:
        return ClusterView(mode="cluster", leader="", epoch=1)

    async def pollers(self) -> list[Member]:
        return [Member(id=i, address=a) for i, a in self.addresses.items()]


class PartOf:
    """A poller as ``PollerServiceServicer.GetOverviewPart`` reads it: its part, and who asked."""

    def __init__(self, part: OverviewPart) -> None:
        self.part = part
        self.asked: list[tuple[str, OverviewWindow]] = []

    def overview_part(self, owner: str, window: OverviewWindow) -> OverviewPart:
        self.asked.append((owner, window))
        return self.part


async def test_the_api_node_gathers_every_pollers_part_over_grpc_and_leaves_out_the_silent() -> (
    None
):
    part = OverviewPart(
        running=3, waiting={"waiting for a free slot": 2},
        buckets=(OverviewBucket(start=NOW.replace(second=0), failed=1, lag_counts=(1,) + (0,) * (LAG_BUCKETS - 1)),),
        failing_jobs=(failing_job("j1", 5, NOW),), since=NOW,
    )  # fmt: skip
    remote = PartOf(part)
    server = grpc.aio.server()
    cluster_pb2_grpc.add_PollerServiceServicer_to_server(PollerServiceServicer(remote), server)  # type: ignore[arg-type]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))  # bound, never listening: refused at once
    coordination = Pollers(
        {"p1": f"127.0.0.1:{port}", "p2": f"127.0.0.1:{silent.getsockname()[1]}"}
    )
    router = ShardRouter(coordination, None, 8)  # type: ignore[arg-type]
    try:
        parts = await router.overview_parts("team-a", OverviewWindow.DAY)
        assert parts == [part]
        assert remote.asked == [("team-a", OverviewWindow.DAY)]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = cluster_pb2_grpc.PollerServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as bad:
                await stub.GetOverviewPart(cluster_pb2.OverviewPartRequest(owner="no spaces"))
        assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert (bad.value.details() or "").startswith("owner:")
        assert len(remote.asked) == 1  # refused before the poller was asked
    finally:
        silent.close()
        await router.close()
        await server.stop(None)


class Parts:
    """The pollers' answers as ``PollerLink.overview_parts`` gives them."""

    def __init__(self, *parts: OverviewPart) -> None:
        self.parts = list(parts)

    async def overview_parts(self, owner: str, window: OverviewWindow) -> list[OverviewPart]:
        return self.parts


async def test_failing_jobs_are_shown_as_stored_and_dropped_when_gone_or_recovered(
    sqlite_store: SqliteStore,
) -> None:
    def stored(name: str, streak: int, owner: str = ALICE, **fields: Any) -> Job:
        return dataclasses.replace(
            make_job(owner, name=name), consecutive_failures=streak, **fields
        )

    renamed = stored("renamed-since", 4)
    recovered = stored("recovered", 0)  # its shard's new poller saw it succeed
    missed = stored("missed", 0)  # MISSED runs are not in a stored streak
    deleted = stored("deleted", 2, state=JobState.DELETED)
    bobs = stored("bobs", 9, owner=BOB)
    await sqlite_store.create_jobs(
        [NewJob(job=j) for j in (renamed, recovered, missed, deleted, bobs)]
    )

    def entry(job: Job, streak: int, state: RunState = RunState.FAILED) -> FailingJob:
        return dataclasses.replace(failing_job(job.id, streak, NOW), name="old name", state=state)

    link = Parts(
        OverviewPart(failing_jobs=(entry(renamed, 1), entry(recovered, 3), entry(bobs, 9))),
        OverviewPart(failing_jobs=(entry(missed, 2, RunState.MISSED), entry(deleted, 2))),
    )
    overview = await read_overview(link, sqlite_store, ALICE, HOUR, NOW)  # type: ignore[arg-type]
    assert [(j.name, j.consecutive_failures) for j in overview.failing_jobs] == [
        ("renamed-since", 4),
        ("missed", 2),
    ]
    assert overview.parts == 2 and len(overview.buckets) == 60


def test_past_its_bound_of_owners_the_history_forgets_the_one_written_longest_ago(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(history_module, "MAX_OWNERS", 3)
    history = RunHistory(since=NOW)
    for owner in ("a", "b", "c"):
        history.ended(ended(RunState.SUCCEEDED, owner=owner), NOW)
    history.ended(ended(RunState.FAILED, owner="a"), NOW)  # "a" written again: "b" is oldest
    history.ended(ended(RunState.SUCCEEDED, owner="d"), NOW)

    def count(owner: str) -> int:
        part = history.part(owner, HOUR, NOW, running=0, waiting={})
        return sum(b.succeeded + b.failed for b in part.buckets)

    assert [count(o) for o in ("a", "b", "c", "d")] == [2, 0, 1, 1]
