"""The audit log: every write to the job API is one JSON line on ``shardcron.audit``,
with the principal, owner, method, ids and outcome, and never a secret."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from pathlib import Path

import grpc
import pytest

from shardcron.coordinator.ids import utcnow
from shardcron.v1 import jobs_pb2, jobs_pb2_grpc, types_pb2
from tests.support.local_node import sqlite_node

SECRET = "audit-secret-value-never-logged"
OWNER = (("x-shardcron-owner", "team-a"),)


LOGGED: list[str] = []  # every message any logger wrote during the test


def lines(caplog: pytest.LogCaptureFixture) -> list[dict]:
    """The audit lines logged since the last call."""
    LOGGED.extend(r.getMessage() for r in caplog.records)
    found = [json.loads(r.getMessage()) for r in caplog.records if r.name == "shardcron.audit"]
    caplog.clear()
    return found


def spec() -> types_pb2.JobSpec:
    command = types_pb2.CommandTask(argv=["true"], secret_env={"TOKEN": SECRET})
    out = types_pb2.JobSpec(name="j", task=types_pb2.Task(command=command))
    out.schedule.kind = types_pb2.SCHEDULE_KIND_AT  # not due while the test runs
    out.schedule.at.FromDatetime(utcnow() + timedelta(days=1))
    return out


async def test_each_write_logs_one_line_and_no_secret(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    node = sqlite_node(tmp_path, "n1")
    await node.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{node.port}")
    api = jobs_pb2_grpc.JobServiceStub(channel)
    try:
        job = (await api.CreateJob(jobs_pb2.CreateJobRequest(spec=spec()), metadata=OWNER)).job
        [line] = lines(caplog)
        assert datetime.fromisoformat(line.pop("at")).tzinfo is not None
        assert line == {
            "principal": "anonymous",
            "owner": "team-a",
            "method": "CreateJob",
            "job_ids": [job.id],
            "run_ids": [],
            "outcome": "OK",
        }
        batch = jobs_pb2.CreateJobsRequest(jobs=[jobs_pb2.CreateJobRequest(spec=spec())] * 2)
        created = await api.CreateJobs(batch, metadata=OWNER)
        [line] = lines(caplog)
        assert line["method"] == "CreateJobs"
        assert line["job_ids"] == [r.job.id for r in created.jobs]

        ref = jobs_pb2.JobRef(job_id=job.id)
        await api.PauseJob(ref, metadata=OWNER)
        await api.ResumeJob(ref, metadata=OWNER)
        run = await api.RunJobNow(ref, metadata=OWNER)
        current = await api.GetJob(jobs_pb2.GetJobRequest(job_id=job.id), metadata=OWNER)
        update = jobs_pb2.UpdateJobRequest(
            job_id=job.id, spec=spec(), expected_version=current.version
        )
        await api.UpdateJob(update, metadata=OWNER)
        with pytest.raises(grpc.aio.AioRpcError):  # may be final already, or cancelled
            await api.CancelRun(jobs_pb2.GetRunRequest(run_id="no-such-run"), metadata=OWNER)
        dead = jobs_pb2.DeadLettersRequest(job_id=job.id)
        await api.DropDeadLetters(dead, metadata=OWNER)
        await api.ReplayDeadLetters(dead, metadata=OWNER)
        await api.DeleteJob(jobs_pb2.DeleteJobRequest(job_id=job.id), metadata=OWNER)
        logged = lines(caplog)
        assert [(x["method"], x["outcome"]) for x in logged] == [
            ("PauseJob", "OK"),
            ("ResumeJob", "OK"),
            ("RunJobNow", "OK"),
            ("UpdateJob", "OK"),
            ("CancelRun", "NOT_FOUND"),
            ("DropDeadLetters", "OK"),
            ("ReplayDeadLetters", "OK"),
            ("DeleteJob", "OK"),
        ]
        assert logged[2]["run_ids"] == [run.id]
        assert logged[4]["run_ids"] == ["no-such-run"]
        assert all(x["job_ids"] == [job.id] for i, x in enumerate(logged) if i != 4)

        # refused before any write: still one line, with the status
        bad = jobs_pb2.CreateJobRequest(spec=types_pb2.JobSpec(name="no task"))
        with pytest.raises(grpc.aio.AioRpcError):
            await api.CreateJob(bad, metadata=OWNER)
        garbage = channel.unary_unary("/shardcron.v1.JobService/DeleteJob")
        with pytest.raises(grpc.aio.AioRpcError):
            await garbage(b"\x0a\x02\xff\xfe", metadata=OWNER)  # job_id not UTF-8
        refused = lines(caplog)
        assert [(x["method"], x["outcome"]) for x in refused] == [
            ("CreateJob", "INVALID_ARGUMENT"),
            ("DeleteJob", "INVALID_ARGUMENT"),
        ]
        # each with why, as the caller was told
        assert refused[0]["reason"].startswith("spec.task")
        assert refused[1]["reason"]
        assert "reason" not in logged[0]  # a write that succeeded has none

        # reads are not writes
        await api.ListJobs(jobs_pb2.ListJobsRequest(), metadata=OWNER)
        assert lines(caplog) == []
    finally:
        await channel.close()
        await node.stop()
    lines(caplog)
    assert LOGGED and all(SECRET not in message for message in LOGGED)
