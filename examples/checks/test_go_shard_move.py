"""Live check: a shard move costs the Go worker's run no second execution.

    SHARDCRON_GO_WORKER=examples/build/go-worker .venv/bin/python -m pytest examples/checks

(run from the repository root, by ``test-clients.sh``; not part of ``make test``,
which has no Go). Two real pollers share one SQLite store, each behind its own
lease-stream server (``Node`` of tests/test_shard_move.py, whose regression tests
prove the same with the Python worker); the Go worker binary is connected to both.
A command job's run is leased by the first; the command records each execution in
a file and waits for a release file. Then the run's shard moves to the second: the
first gives its shards up as ZooKeeper would ask it, or is gone at once (its streams
end, it answers nothing). The Go worker must bring the lease and the result to the
second poller, which adopts the lease: after two lease TTLs past the first owner's
deadline the command is released, and the run ends SUCCEEDED, as attempt 1, under
the first owner's token, executed once, with no retry written.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardcron.client.types import CommandTask, JobSpec, Run, RunState
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.poller import Phase
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import NewJob
from tests.support.store_builders import make_job, make_run
from tests.support.waiting import until
from tests.test_shard_move import ALL, LEASE_TTL, WAIT, Node

GO_WORKER = os.environ.get("SHARDCRON_GO_WORKER", "")
pytestmark = pytest.mark.skipif(
    not GO_WORKER, reason="SHARDCRON_GO_WORKER names no built go-worker (test-clients.sh sets it)"
)


# the suite's fixtures (sqlite_store): this module is collected outside tests/
pytest_plugins = ("tests.conftest",)


@pytest.fixture
def go_log(tmp_path: Path) -> Iterator[Path]:
    """The Go worker's log, shown when the test fails."""
    path = tmp_path / "go-worker.log"
    yield path
    if path.exists():
        print("go-worker log (tail):", *path.read_text().splitlines()[-20:], sep="\n  ")


def executions(path: Path) -> list[str]:
    """One line per execution of the command: its attempt and fencing token."""
    return path.read_text().splitlines() if path.exists() else []


async def command_run(store: SqliteStore, node: Node, script: str) -> Run:
    """A one-off command job, written and hinted to ``node``; its run."""
    now = utcnow()
    spec = JobSpec(name="moved", task=CommandTask(argv=("sh", "-c", script)))
    job = dataclasses.replace(make_job(owner="default", spec=spec), created_at=now, updated_at=now)
    run = dataclasses.replace(make_run(job, due_at=now), created_at=now)
    await store.create_jobs([NewJob(job=job, runs=[run])])
    node.poller.runs_created([run], [job])
    return run


@pytest.mark.parametrize("how", ["release", "kill"])
async def test_go_worker_run_executes_once_across_a_shard_move(
    sqlite_store: SqliteStore, tmp_path: Path, go_log: Path, how: str
) -> None:
    store = sqlite_store
    ran, release = tmp_path / "executions", tmp_path / "release"
    old, new = Node(store, "p-old"), Node(store, "p-new")
    await old.start(ALL, fencing_epoch=1)
    await new.start(frozenset(), fencing_epoch=2)
    with go_log.open("w") as log:
        worker = subprocess.Popen(
            [GO_WORKER, "--target", f"{old.address},{new.address}", "--id", "go-move",
             "--slots", "2", "--kill-grace", "1s"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        await until(lambda: go_log.read_text().count("msg=connected") == 2, WAIT, "two streams")
        script = f'echo "$SHARDCRON_ATTEMPT $SHARDCRON_FENCING_TOKEN" >> {ran}; ' \
                 f"while [ ! -e {release} ]; do sleep 0.05; done"  # fmt: skip
        run = await command_run(store, old, script)
        await until(lambda: old.poller.phase_of(run.id) == Phase.LEASED, WAIT, "leased by old")
        await until(lambda: executions(ran), WAIT, "the command started")
        first = (await store.get_runs([run.id]))[run.id]

        if how == "kill":
            ended = go_log.read_text().count("stream to poller ended")
            await old.kill()
            await until(
                lambda: go_log.read_text().count("stream to poller ended") > ended,
                WAIT,
                "the Go worker saw the old poller's stream end",
            )
        else:
            await old.assign(frozenset(), fencing_epoch=1)  # released, as ZooKeeper asks
        await new.assign(ALL, fencing_epoch=2)
        await until(lambda: new.poller.phase_of(run.id) == Phase.LEASED, WAIT, "adopted")
        # past the deadline the first owner gave: only the new owner's renewals keep it
        await asyncio.sleep(LEASE_TTL.total_seconds() * 2)
        assert executions(ran) == [f"1 {first.lease_token}"], "killed or executed again"
        assert worker.poll() is None, "the Go worker exited"
        release.touch()

        async def final() -> Run | None:
            r = (await store.get_runs([run.id]))[run.id]
            return r if r.state.is_final else None

        for _ in range(int(WAIT / 0.05)):
            if (ended_run := await final()) is not None:
                break
            await asyncio.sleep(0.05)
        assert ended_run is not None, "the run did not end"
        assert (ended_run.state, ended_run.attempt, ended_run.lease_token) == (
            RunState.SUCCEEDED,
            1,
            first.lease_token,
        )
        assert executions(ran) == [f"1 {first.lease_token}"]
        runs = await store.list_runs(run.owner, run.job_id)
        assert [r.id for r in runs.items] == [run.id], "a retry was written"
    finally:
        worker.kill()  # its reaper kills what is left of the command
        worker.wait()
        if how != "kill":
            await old.kill()
        await new.kill()
