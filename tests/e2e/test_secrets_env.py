"""Secret env values and the command's environment, with real processes: a ``shardcron
dev`` without in-process workers and two ``shardcron worker`` processes, one with
``--inherit-env``, chosen by a label.

A secret value must never come back: not in any JobService answer, not in the CLI's
output, not in the node's or the workers' logs; yet the command gets it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import grpc
import pytest

from shardcron.client.sdk import Client
from shardcron.client.types import (
    SECRET_PLACEHOLDER,
    CommandTask,
    JobSpec,
    Resources,
    RunState,
    Schedule,
)
from shardcron.v1 import jobs_pb2, jobs_pb2_grpc
from tests.e2e.harness import DevServer, Proc

SECRET = f"s3cr3t-{uuid.uuid4().hex}"
WORKER_ONLY = "SHARDCRON_TEST_WORKER_ONLY"  # set in both workers' environment, never a job's


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    base = tmp_path_factory.mktemp("secrets")
    dev = DevServer(
        base / "data", extra=["--workers", "0", "--lease-ttl", "3s", "--log-level", "debug"]
    ).start()
    env = {WORKER_ONLY: "worker-value", "OTHER_WORKER_VAR": "x"}
    workers = [
        Proc(
            ["worker", "--target", dev.target, "--label", "env=base", "--log-level", "debug"],
            base / "worker-base.log",
            env,
        ).start(),
        Proc(
            ["worker", "--target", dev.target, "--label", "env=all", "--inherit-env"],
            base / "worker-inherit.log",
            env,
        ).start(),
    ]
    dev.workers = workers  # type: ignore[attr-defined]
    yield dev
    for w in workers:
        w.stop()
    dev.stop()


def command(argv: list[str], pool: str = "base", **task: dict[str, str]) -> JobSpec:
    return JobSpec(
        name=f"env-{uuid.uuid4().hex[:6]}",
        task=CommandTask(argv=tuple(argv), **task),  # type: ignore[arg-type]
        resources=Resources(labels={"env": pool}),
    )


def printed_env(client: Client, spec: JobSpec) -> dict[str, str]:
    job = client.create_job(spec)
    [run] = client.wait_job_runs(job.id, count=1, timeout=60)
    assert run.state == RunState.SUCCEEDED, run
    text = b"".join(c.data for c in client.read_output(run.id)).decode()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_a_command_gets_its_job_env_and_a_minimal_base(cluster: DevServer) -> None:
    with cluster.client() as client:
        env = printed_env(client, command(["env"], env={"GREETING": "hi"}))
    assert env["GREETING"] == "hi"
    assert "PATH" in env
    assert {k for k in env if not k.startswith("SHARDCRON_")} <= {
        "PATH",
        "HOME",
        "LANG",
        "GREETING",
    }
    assert WORKER_ONLY not in env and "OTHER_WORKER_VAR" not in env
    assert {"SHARDCRON_RUN_ID", "SHARDCRON_ATTEMPT", "SHARDCRON_FENCING_TOKEN"} <= env.keys()


def test_a_worker_with_inherit_env_passes_its_whole_environment(cluster: DevServer) -> None:
    with cluster.client() as client:
        env = printed_env(client, command(["env"], pool="all", env={"GREETING": "hi"}))
    assert env[WORKER_ONLY] == "worker-value" and env["OTHER_WORKER_VAR"] == "x"
    assert env["GREETING"] == "hi"


def test_secret_values_reach_the_command_and_nothing_else(cluster: DevServer) -> None:
    owner = f"sec-{uuid.uuid4().hex[:8]}"
    want = cluster.data_dir.parent / "want"
    want.write_text(SECRET)
    # the command proves it got the value without printing it
    spec = command(
        ["sh", "-c", 'test "$DB_PASSWORD" = "$(cat "$WANT")" && echo ok'],
        env={"WANT": str(want)},
        secret_env={"DB_PASSWORD": SECRET},
    ).replace(schedule=Schedule.cron_expr("0 0 1 1 *"))  # runs only when asked to
    with cluster.client(owner) as client:
        created = client.create_job(spec)
        assert created.spec.task.secret_env == {"DB_PASSWORD": SECRET_PLACEHOLDER}
        client.run_job_now(created.id)
        [run] = client.wait_job_runs(created.id, count=1, timeout=60)
        assert run.state == RunState.SUCCEEDED, run
        assert b"".join(c.data for c in client.read_output(run.id)) == b"ok\n"

        # an update sending back what it read (placeholders) keeps the value
        job = client.get_job(created.id)
        client.update_job(job.id, job.spec.replace(name="renamed"), expected_version=job.version)
        client.run_job_now(job.id)
        runs = client.wait_job_runs(job.id, count=2, timeout=60)
        assert all(r.state == RunState.SUCCEEDED for r in runs), runs

        answers = raw_answers(cluster, owner, job.id, run.id)
        cli = [
            cluster.cli("job", "get", job.id, owner=owner).stdout,
            cluster.cli("--json", "job", "get", job.id, owner=owner).stdout,
            cluster.cli("--json", "job", "list", owner=owner).stdout,
            cluster.cli("job", "update", job.id, "--priority", "3", owner=owner).stdout,
        ]
        assert "DB_PASSWORD=***" in cli[0]
        assert json.loads(cli[1])["spec"]["task"]["secret_env"] == {"DB_PASSWORD": "***"}
        client.run_job_now(job.id)  # the CLI's update kept it too
        runs = client.wait_job_runs(job.id, count=3, timeout=60)
        assert all(r.state == RunState.SUCCEEDED for r in runs), runs

        # KEY= removes it: the command no longer gets it
        cluster.cli("job", "update", job.id, "--secret-env", "DB_PASSWORD=", owner=owner)
        assert client.get_job(job.id).spec.task.secret_env == {}
        client.run_job_now(job.id)
        runs = client.wait_job_runs(job.id, count=4, timeout=60)
        assert sorted(r.state for r in runs).count(RunState.FAILED) == 1, runs
        cli.append(cluster.cli("job", "delete", job.id, owner=owner).stdout)

    for text in cli:
        assert SECRET not in text
    for answer in answers:
        assert SECRET.encode() not in answer
    for log in (cluster.proc.output(), *(w.output() for w in cluster.workers)):  # type: ignore[union-attr,attr-defined]
        assert SECRET not in log


def raw_answers(cluster: DevServer, owner: str, job_id: str, run_id: str) -> list[bytes]:
    """The bytes of every JobService read answer about the job and its runs."""
    metadata = (("x-shardcron-owner", owner),)
    with grpc.insecure_channel(cluster.target) as channel:
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        answers = [
            stub.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=metadata),
            stub.ListJobs(jobs_pb2.ListJobsRequest(), metadata=metadata),
            stub.ListRuns(jobs_pb2.ListRunsRequest(job_id=job_id), metadata=metadata),
            stub.GetRun(jobs_pb2.GetRunRequest(run_id=run_id), metadata=metadata),
            stub.PauseJob(jobs_pb2.JobRef(job_id=job_id), metadata=metadata),
            stub.ResumeJob(jobs_pb2.JobRef(job_id=job_id), metadata=metadata),
            stub.PreviewFires(jobs_pb2.PreviewFiresRequest(job_id=job_id), metadata=metadata),
            *stub.ReadRunOutput(jobs_pb2.ReadRunOutputRequest(run_id=run_id), metadata=metadata),
        ]
    return [a.SerializeToString() for a in answers]
