"""Secret env values and the command's environment, with real processes: a ``shardcron
dev`` without in-process workers and two ``shardcron worker`` processes, one with
``--inherit-env``, chosen by a label.

A secret value must never come back: not in any JobService answer, not in the CLI's
output, not in the node's or the workers' logs, not in the store's file (the node seals
it with ``--secrets-key-file``); yet the command gets it. Keys rotate; a node without
the key a value was sealed with fails the run that needs it, naming the key.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import grpc
import pytest

from shardcron.client.sdk import Client
from shardcron.client.types import (
    SECRET_PLACEHOLDER,
    CommandTask,
    JobSpec,
    Resources,
    Run,
    RunReason,
    RunState,
    Schedule,
)
from shardcron.v1 import jobs_pb2, jobs_pb2_grpc
from tests.e2e.harness import DevServer, Proc
from tests.support.containment import shared_dir

SECRET = f"s3cr3t-{uuid.uuid4().hex}"
WORKER_ONLY = "SHARDCRON_TEST_WORKER_ONLY"  # set in both workers' environment, never a job's


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    base = tmp_path_factory.mktemp("secrets")
    keys = write_keys(base / "keys", "k1")
    extra = ["--workers", "0", "--lease-ttl", "3s", "--log-level", "debug"]
    dev = DevServer(base / "data", extra=[*extra, "--secrets-key-file", str(keys)]).start()
    # a node without an auth file ignores the tokens: what counts is that no command
    # gets them, even from a worker that passes its whole environment
    env = {
        WORKER_ONLY: "worker-value",
        "OTHER_WORKER_VAR": "x",
        "SHARDCRON_TOKEN": "worker-token",
        "SHARDCRON_SECRETS_KEY_FILE": str(keys),
    }
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


def write_keys(path: Path, *key_ids: str) -> Path:
    """A key file of ``key_ids`` (the first seals), each key kept per id for rewrites."""
    lines = [
        f"{k} {KEYS.setdefault(k, base64.b64encode(os.urandom(32)).decode())}" for k in key_ids
    ]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    return path


KEYS: dict[str, str] = {}


def stored_bytes(data_dir: Path) -> bytes:
    """Every byte of the dev store's file and its WAL, checkpointed."""
    db = data_dir / "shardcron.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    return b"".join(p.read_bytes() for p in data_dir.glob("shardcron.db*"))


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
        "TMPDIR",  # in the run's own directory
        "GREETING",
    }
    assert WORKER_ONLY not in env and "OTHER_WORKER_VAR" not in env
    assert {"SHARDCRON_RUN_ID", "SHARDCRON_ATTEMPT", "SHARDCRON_FENCING_TOKEN"} <= env.keys()


def test_a_worker_with_inherit_env_passes_its_whole_environment(cluster: DevServer) -> None:
    with cluster.client() as client:
        env = printed_env(client, command(["env"], pool="all", env={"GREETING": "hi"}))
    assert env[WORKER_ONLY] == "worker-value" and env["OTHER_WORKER_VAR"] == "x"
    assert env["GREETING"] == "hi"
    assert "SHARDCRON_TOKEN" not in env and "SHARDCRON_SECRETS_KEY_FILE" not in env


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

    kept = stored_bytes(cluster.data_dir)
    assert b"sealed:v1:k1:" in kept and SECRET.encode() not in kept
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


def test_sealed_values_follow_a_key_rotation_and_fail_alone_without_their_key(
    tmp_path: Path,
) -> None:
    keys = write_keys(tmp_path / "keys", "2026-01")
    dev = DevServer(tmp_path / "data", extra=["--secrets-key-file", str(keys)])
    # the command runs as its owner's user (dev as root): the value to compare with is
    # shared with it where that user may read it
    shared = ExitStack()
    want = shared.enter_context(shared_dir()) / "want"
    want.write_text(SECRET)
    want.chmod(0o644)
    spec = JobSpec(
        name="rotated",
        task=CommandTask(
            argv=("sh", "-c", 'test "$DB_PASSWORD" = "$(cat "$WANT")" && echo ok'),
            env={"WANT": str(want)},
            secret_env={"DB_PASSWORD": SECRET},
        ),
        schedule=Schedule.cron_expr("0 0 1 1 *"),
    )
    plain = JobSpec(name="plain", task=CommandTask(argv=("true",)))

    def run_now(job_id: str) -> Run:
        with dev.client("rot") as client:
            return client.wait_run(client.run_job_now(job_id).id, timeout=60)

    try:
        dev.start()
        with dev.client("rot") as client:
            job = client.create_job(spec)
            other = client.create_job(plain)
        assert run_now(job.id).state == RunState.SUCCEEDED
        dev.stop()

        write_keys(keys, "2026-11", "2026-01")  # a new key first: the old one still opens
        dev.start()
        assert run_now(job.id).state == RunState.SUCCEEDED
        with dev.client("rot") as client:  # an update seals the value again, with the new key
            stored = client.get_job(job.id)
            client.update_job(
                job.id, stored.spec.replace(name="r2"), expected_version=stored.version
            )
        dev.stop()

        write_keys(keys, "2026-11")  # the old key retired
        dev.start()
        assert run_now(job.id).state == RunState.SUCCEEDED
        dev.stop()

        write_keys(keys, "elsewhere")  # a node without the key: the run fails, naming it
        dev.start()
        failed = run_now(job.id)
        assert failed.state == RunState.FAILED and failed.reason == RunReason.INTERNAL_ERROR
        assert "sealed with key '2026-11'" in failed.error and SECRET not in failed.error
        assert run_now(other.id).state == RunState.SUCCEEDED  # the others still run
        log = dev.proc.output()  # type: ignore[union-attr]
    finally:
        dev.stop()
        shared.close()
    assert SECRET not in log
    kept = stored_bytes(dev.data_dir)
    assert b"sealed:v1:2026-11:" in kept and SECRET.encode() not in kept
