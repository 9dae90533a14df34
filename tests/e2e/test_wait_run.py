"""``WaitRun`` end to end: the SDK's ``wait_run`` (sync and asyncio) waits on the server
until a run is final, gives up at its timeout, and bad input gets INVALID_ARGUMENT; and
what a one-off job looks like once its run has ended."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from shardcron.client.errors import InvalidArgument, NotFound
from shardcron.client.sdk import AsyncClient
from shardcron.client.types import CommandTask, JobSpec, JobState, RetryPolicy, RunState
from shardcron.v1 import jobs_pb2, jobs_pb2_grpc
from tests.e2e.harness import DevServer
from tests.support.waiting import wait_until


def sh(script: str) -> JobSpec:
    return JobSpec(
        name="wait", task=CommandTask(argv=("sh", "-c", script)), retry=RetryPolicy(max_attempts=1)
    )


def first_run(client, job_id: str):  # type: ignore[no-untyped-def]
    return client.list_runs(job_id).items[0]


def test_wait_run_returns_the_run_once_final(client) -> None:  # type: ignore[no-untyped-def]
    job = client.create_job(sh("sleep 0.5; exit 4"))
    final = client.wait_run(first_run(client, job.id).id, timeout=30)
    assert final.state == RunState.FAILED and final.exit_code == 4


def test_wait_run_gives_up_at_its_timeout(client) -> None:  # type: ignore[no-untyped-def]
    job = client.create_job(sh("sleep 60"))
    run = first_run(client, job.id)
    with pytest.raises(TimeoutError, match=run.id):
        client.wait_run(run.id, timeout=0.3)
    client.cancel_run(run.id)
    assert client.wait_run(run.id, timeout=30).state == RunState.CANCELLED


def test_async_wait_run(dev: DevServer, client) -> None:  # type: ignore[no-untyped-def]
    job = client.create_job(sh("echo hi"))
    run_id = first_run(client, job.id).id

    async def wait() -> RunState:
        async with AsyncClient(dev.target, owner=client.owner, timeout=15) as c:
            return (await c.wait_run(run_id, timeout=30)).state

    assert asyncio.run(wait()) == RunState.SUCCEEDED


def test_wait_run_refuses_bad_input(dev: DevServer, client) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(NotFound):
        client.wait_run("no-such-run", timeout=5)
    with pytest.raises(InvalidArgument, match="run_id"):
        client.wait_run("", timeout=5)
    with grpc.insecure_channel(dev.target) as channel:
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        request = jobs_pb2.WaitRunRequest(run_id="x")
        request.timeout.seconds = 301
        with pytest.raises(grpc.RpcError) as e:
            stub.WaitRun(request, timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    assert "timeout: at most 300s" in e.value.details()  # type: ignore[attr-defined]


def test_one_off_job_whose_run_was_cancelled_is_completed_with_no_next_fire(client) -> None:  # type: ignore[no-untyped-def]
    """Regression: a one-off job whose only run was cancelled (or failed) was listed
    COMPLETED with its spent fire, in the past, as its next fire."""
    job = client.create_job(sh("sleep 60"))
    run = first_run(client, job.id)
    client.cancel_run(run.id)
    assert client.wait_run(run.id, timeout=30).state == RunState.CANCELLED
    wait_until(lambda: client.get_job(job.id).state == JobState.COMPLETED, what="COMPLETED")
    got = client.get_job(job.id)
    assert (got.next_fire_at, got.next_fire_key) == (None, "")
    [listed] = client.list_jobs(states=[JobState.COMPLETED]).items
    assert listed.next_fire_at is None
