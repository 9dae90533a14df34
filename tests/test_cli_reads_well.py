"""The CLI as people read it, without a server (``FakeClient`` stands in for the SDK):
root options after the subcommand, JSON errors, Ctrl-C, completion, what ``job create``
prints, tables that fit 120 columns, times in the job's zone, no lease on a finished run.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from shardcron.client.cli.root import cli
from shardcron.client.errors import InvalidArgument, NotFound
from shardcron.client.types import (
    ClusterStatus,
    Job,
    JobHealth,
    JobHealthRun,
    JobState,
    LateReason,
    Page,
    Run,
    RunLateness,
    RunReason,
    RunState,
    RunUsage,
    WorkerInfo,
)
from tests.support.cli import T0, FakeClient, invoke, make_run


class Runs(FakeClient):
    """A fake whose job has ``runs`` (newest first) and whose get_run knows them."""

    def __init__(self, runs: list[Run], **kw: Any) -> None:
        super().__init__(**kw)
        self.runs = runs

    def list_runs(self, job_id: str, **kwargs: Any) -> Page[Run]:
        self._record("list_runs", job_id, **kwargs)
        return Page(items=list(self.runs), next_page_token="")

    def iter_runs(self, job_id: str, **kwargs: Any) -> Any:
        self._record("iter_runs", job_id, **kwargs)
        return iter(self.runs)

    def get_run(self, run_id: str) -> Run:
        self._record("get_run", run_id)
        for r in self.runs:
            if r.id == run_id:
                return r
        raise NotFound(f"run {run_id} not found")

    def wait_run(self, run_id: str, *, timeout: float | None = None) -> Run:
        self._record("wait_run", run_id, timeout=timeout)
        return self.get_run(run_id)

    def list_jobs(self, **kwargs: Any) -> Page[Job]:
        return Page(items=[self.current], next_page_token="")

    def iter_jobs(self, **kwargs: Any) -> Any:
        return iter([self.current])


def ran(run_id: str, state: RunState, *, attempt: int = 1, **fields: Any) -> Run:
    started = T0 + timedelta(milliseconds=12)
    return dataclasses.replace(
        make_run(state),
        id=run_id,
        attempt=attempt,
        started_at=started,
        ended_at=started + timedelta(milliseconds=345),
        exit_code=0 if state is RunState.SUCCEEDED else 3,
        worker_id="w1",
        lease_token=(7 << 32) | 1,
        lease_expires_at=T0 + timedelta(seconds=30),
        **fields,
    )


# --------------------------------------------------------------------------- root options


@pytest.mark.parametrize(
    "args",
    [
        ["--json", "run", "list", "job-1"],
        ["run", "list", "job-1", "--json"],
        ["run", "list", "--json", "job-1"],
    ],
)
def test_json_is_accepted_before_and_after_the_subcommand(args: list[str]) -> None:
    """Regression: ``shardcron run list JOB --json`` answered "No such option"."""
    result = invoke(args, obj=Runs([ran("run-1", RunState.SUCCEEDED)]))
    assert result.exit_code == 0, result.output
    assert [r["id"] for r in json.loads(result.stdout)] == ["run-1"]


def test_target_and_owner_after_the_subcommand_replace_the_root_ones() -> None:
    fake = Runs([ran("run-1", RunState.SUCCEEDED)])
    result = invoke(
        ["--owner", "a", "run", "get", "run-1", "--owner", "b", "--target", "h:9"], obj=fake
    )
    assert result.exit_code == 0, result.output
    assert fake.connected == {"target": "h:9", "owner": "b", "timeout": 30.0}


def test_a_command_keeps_its_own_timeout_option() -> None:
    fake = Runs([ran("run-1", RunState.SUCCEEDED)])
    result = invoke(["--timeout", "5", "run", "wait", "run-1", "--timeout", "1m"], obj=fake)
    assert result.exit_code == 0, result.output
    assert fake.connected["timeout"] == 5.0
    [waited] = [kwargs["timeout"] for name, _, kwargs in fake.calls if name == "wait_run"]
    assert 59 < waited <= 60


def test_errors_under_json_are_json_on_stderr() -> None:
    fake = FakeClient(error=InvalidArgument("spec.schedule.cron", "never fires"))
    result = invoke(["job", "get", "job-1", "--json"], obj=fake)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert json.loads(result.stderr) == {
        "error": {
            "code": "INVALID_ARGUMENT",
            "message": "spec.schedule.cron: never fires",
            "field": "spec.schedule.cron",
        }
    }


def test_usage_errors_under_json_are_json_too() -> None:
    result = invoke(["--json", "job", "create", "n", "--timeout", "5x", "--", "true"])
    assert result.exit_code == 2
    error = json.loads(result.stderr)["error"]
    assert error["code"] == "USAGE" and "--timeout" in error["message"]


def test_ctrl_c_exits_130_quietly() -> None:
    """Regression: Ctrl-C in ``run logs -f`` printed "Aborted!" and exited 1."""

    class Interrupted(FakeClient):
        def read_output(self, run_id: str, **kw: Any) -> Any:
            yield from ()
            raise KeyboardInterrupt

    result = invoke(["run", "logs", "-f", "run-1"], obj=Interrupted())
    assert result.exit_code == 130
    assert "Aborted" not in result.output
    assert result.stdout == "" and result.stderr == ""


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_script_for_the_shell(shell: str) -> None:
    result = invoke(["completion", shell])
    assert result.exit_code == 0, result.output
    assert "_SHARDCRON_COMPLETE" in result.stdout


# --------------------------------------------------------------------------- job create


def test_job_create_prints_the_job_its_first_run_and_next_fires() -> None:
    fake = FakeClient(run_state=RunState.PENDING)
    result = invoke(
        ["job", "create", "n", "--cron", "0 9 * * *", "--tz", "Europe/Berlin", "--", "true"],
        obj=fake,
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "job        job-1",
        "first run  run-1 (due 2026-03-01 10:00:00 CET)",
        "next fire  2026-03-01 10:00:00 CET",
        "           2026-03-01 11:00:00 CET",
        "           2026-03-01 12:00:00 CET",
    ]
    assert ("preview_fires", ("job-1",), {"count": 3}) in fake.calls


def test_job_create_quiet_prints_only_the_id() -> None:
    fake = FakeClient()
    result = invoke(["job", "create", "-q", "n", "--", "true"], obj=fake)
    assert result.exit_code == 0, result.output
    assert result.stdout == "job-1\n"
    assert [c[0] for c in fake.calls] == ["create_job"]


def test_job_create_json_adds_the_first_run_and_next_fires() -> None:
    result = invoke(
        ["job", "create", "n", "--every", "1h", "--json", "--", "true"], obj=FakeClient()
    )
    doc = json.loads(result.stdout)
    assert doc["id"] == "job-1" and doc["first_run_id"] == "run-1"
    assert len(doc["next_fires"]) == 3


@pytest.mark.parametrize(("state", "code"), [(RunState.SUCCEEDED, 0), (RunState.FAILED, 1)])
def test_job_create_wait_follows_retries_and_exits_0_only_on_success(
    state: RunState, code: int
) -> None:
    first = ran("run-1", RunState.FAILED, reason=RunReason.NON_ZERO_EXIT)
    retry = ran("run-2", state, attempt=2, dead_letter=state is RunState.FAILED)
    fake = Runs([retry, first])
    result = invoke(["job", "create", "-q", "--wait", "n", "--", "false"], obj=fake)
    assert result.exit_code == code, result.output
    assert result.stdout == f"job-1\nrun-2 {state.value}\n"
    assert "attempt 1 FAILED (NON_ZERO_EXIT): attempt 2 due" in result.stderr
    assert [c[1] for c in fake.calls if c[0] == "wait_run"] == [("run-1",), ("run-2",)]


# --------------------------------------------------------------------------- runs


def test_run_logs_and_wait_take_a_job_id_for_its_latest_run() -> None:
    """Regression: ``run logs JOB_ID`` answered NOT_FOUND."""
    pending = dataclasses.replace(make_run(RunState.PENDING), id="run-3")
    fake = Runs([pending, ran("run-2", RunState.SUCCEEDED), ran("run-1", RunState.FAILED)])
    result = invoke(["run", "logs", "job-1"], obj=fake)
    assert result.exit_code == 0, result.output
    assert ("read_output", ("run-2",), {"offset": 0, "follow": False, "limit": 0}) in fake.calls
    assert invoke(["run", "get", "job-1"], obj=fake).stdout.startswith("id             run-2\n")
    result = invoke(["run", "wait", "job-1"], obj=fake)
    assert result.stdout == "run-2 SUCCEEDED\n"


def test_run_list_fits_120_columns_without_the_job_id_with_durations_in_the_job_zone() -> None:
    long_reason = dataclasses.replace(
        make_run(RunState.PENDING), id="run-3", waiting_reason="no connected worker " * 8
    )
    fake = Runs([long_reason, ran("run-2", RunState.SUCCEEDED), ran("run-1", RunState.FAILED)])
    result = invoke(["run", "list", "job-1"], obj=fake)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 120
    assert "job-1" not in result.stdout
    header = lines[0].split()
    assert header[:4] == ["RUN", "ID", "STATE", "TRY"] and "(Europe/Berlin)" in lines[0]
    assert "TOOK" in header
    row = lines[2].split()
    # fired 09:00 UTC = 10:00 in Berlin; started 12 ms later; took 345 ms
    fired = ["03-01"] if datetime.now(UTC).year == 2026 else ["2026-03-01"]  # the year only if past
    assert row[:7] == ["run-2", "SUCCEEDED", "1", *fired, "10:00:00", "10:00:00.012", "345ms"]
    assert lines[1].endswith("…")


def test_utc_shows_times_in_utc() -> None:
    fake = Runs([ran("run-2", RunState.SUCCEEDED)])
    result = invoke(["run", "list", "job-1", "--utc"], obj=fake)
    assert "(UTC)" in result.stdout and "09:00:00.012" in result.stdout


def test_a_finished_run_shows_no_lease() -> None:
    """Regression: ``run get`` on a finished run still showed its lease token."""
    done = Runs([ran("run-1", RunState.SUCCEEDED)])
    result = invoke(["run", "get", "run-1"], obj=done)
    assert result.exit_code == 0, result.output
    fields = dict(line.split(None, 1) for line in result.stdout.splitlines() if " " in line)
    assert "lease" not in fields and fields["took"].strip() == "345ms"
    running = Runs([dataclasses.replace(ran("run-1", RunState.RUNNING), ended_at=None)])
    assert "lease" in invoke(["run", "get", "run-1"], obj=running).stdout


def test_run_get_shows_what_its_command_used_and_whether_limits_held() -> None:
    used = RunUsage(peak_memory_bytes=3 * 1024 * 1024, cpu_seconds=1.5)
    oom = dataclasses.replace(
        ran("run-1", RunState.FAILED), reason=RunReason.OOM_KILLED, usage=used
    )
    out = invoke(["run", "get", "run-1"], obj=Runs([oom])).stdout
    assert "OOM_KILLED" in out and "used           peak memory 3.0 MiB, CPU 1.500s\n" in out
    loose = dataclasses.replace(oom, usage=dataclasses.replace(used, limits_enforced=False))
    assert (
        "(limits not enforced on its worker)"
        in invoke(["run", "get", "run-1"], obj=Runs([loose])).stdout
    )
    handler = ran("run-1", RunState.SUCCEEDED)
    assert "used           -\n" in invoke(["run", "get", "run-1"], obj=Runs([handler])).stdout


def test_run_get_and_list_say_why_a_run_was_late_skipped_or_missed() -> None:
    slow = RunLateness(
        reason=LateReason.NO_FREE_SLOT,
        text="leased 4.0 s after its due time: waiting for a free slot for 4.0 s",
        waited=timedelta(seconds=4),
    )
    late = ran("run-3", RunState.SUCCEEDED, lateness=slow)
    paused = ran(
        "run-2", RunState.SKIPPED, reason=RunReason.PAUSED,
        lateness=RunLateness(reason=LateReason.PAUSED, text="paused"),
    )  # fmt: skip
    missed = ran(
        "run-1", RunState.MISSED, reason=RunReason.DEADLINE,
        lateness=RunLateness(reason=LateReason.NO_WORKER_WITH_LABELS, text="its deadline..."),
    )  # fmt: skip
    out = invoke(["run", "get", "run-3"], obj=Runs([late])).stdout
    assert (
        "late           leased 4.0 s after its due time: waiting for a free slot for 4.0 s"
        " [NO_FREE_SLOT]\n"
    ) in out
    on_time = ran("run-3", RunState.SUCCEEDED)
    assert "late           -\n" in invoke(["run", "get", "run-3"], obj=Runs([on_time])).stdout
    lines = invoke(["run", "list", "job-1"], obj=Runs([late, paused, missed])).stdout.splitlines()
    assert lines[1].endswith("late: NO_FREE_SLOT")
    assert lines[2].endswith(" PAUSED")  # the reason says it already
    assert lines[3].endswith("DEADLINE, late: NO_WORKER_WITH_LABELS")


# --------------------------------------------------------------------------- jobs


def test_job_list_and_get_show_the_last_run_beside_the_state() -> None:
    fake = Runs([ran("run-2", RunState.FAILED, reason=RunReason.NON_ZERO_EXIT)])
    fake.current = dataclasses.replace(fake.current, next_fire_at=T0, state=JobState.ACTIVE)
    result = invoke(["job", "list"], obj=fake)
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()
    assert header.split() == [
        "JOB",
        "ID",
        "NAME",
        "STATE",
        "LAST",
        "RUN",
        "RECENT",
        "RUNS",
        "SUCCESS",
        "SCHEDULE",
        "NEXT",
        "FIRE",
    ]
    assert row.split() == [
        "job-1", "old", "ACTIVE", "FAILED", "-", "-", "cron", "0", "9", "*", "*", "*",
        "03-01" if datetime.now(UTC).year == 2026 else "2026-03-01", "10:00:00", "CET",
    ]  # fmt: skip
    got = invoke(["job", "get", "job-1"], obj=fake).stdout
    assert (
        "last run           FAILED (NON_ZERO_EXIT, exit 3) 2026-03-01 10:00:00 CET, run run-2"
        in got
    )


def healthy_job(*states: RunState) -> Job:
    """The fake's job with ``states`` as its last runs, newest first."""
    runs = tuple(
        JobHealthRun(run_id=f"run-{i}", state=s, due_at=T0 - timedelta(minutes=i))
        for i, s in enumerate(states)
    )
    job = Runs([]).current
    return dataclasses.replace(job, state=JobState.COMPLETED, health=JobHealth(runs=runs))


class Healthy(Runs):
    """A fake whose job list carries each job's health, as a node asked for it gives."""

    def __init__(self, job: Job) -> None:
        super().__init__([])
        self.current = job

    def iter_jobs(self, **kwargs: Any) -> Any:
        self._record("iter_jobs", **kwargs)
        return iter([self.current])


def test_job_list_shows_the_last_runs_as_a_strip_and_the_success_rate() -> None:
    """Newest first from the node, oldest first on the line; a failed one-shot job shows
    FAILED beside COMPLETED, with no read of its runs beyond the list."""
    s = RunState
    fake = Healthy(healthy_job(s.FAILED, s.FAILED, s.SUCCEEDED, s.CANCELLED, s.SUCCEEDED))
    result = invoke(["job", "list"], obj=fake)
    assert result.exit_code == 0, result.output
    row = result.stdout.splitlines()[1].split()
    assert row[2:8] == ["COMPLETED", "FAILED", "✓·✓✗✗", "50%", "of", "4"]
    assert [c[0] for c in fake.calls] == ["iter_jobs"]
    assert fake.calls[0][2]["with_health"] is True


def test_job_list_strip_falls_back_to_ascii_and_is_data_under_json() -> None:
    s = RunState
    fake = Healthy(healthy_job(s.RUNNING, s.TIMED_OUT, s.SUCCEEDED, s.MISSED, s.SKIPPED))
    ascii_out = CliRunner(charset="ascii").invoke(cli, ["job", "list"], obj=fake)
    assert ascii_out.exit_code == 0, ascii_out.output
    assert ascii_out.stdout.splitlines()[1].split()[3:6] == ["RUNNING", ".x+x>", "33%"]
    listed = json.loads(invoke(["--json", "job", "list"], obj=fake).stdout)
    health = listed[0]["health"]
    assert [r["state"] for r in health["runs"]][1:] == [
        "TIMED_OUT",
        "SUCCEEDED",
        "MISSED",
        "SKIPPED",
    ]
    assert health["runs"][0]["run_id"] == "run-0"
    assert (health["succeeded"], health["rated"]) == (1, 3)
    assert health["success_rate"] == pytest.approx(1 / 3)


def test_job_create_wait_under_json_prints_one_document() -> None:
    fake = Runs([ran("run-1", RunState.SUCCEEDED)])
    result = invoke(["job", "create", "n", "--wait", "--json", "--", "true"], obj=fake)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["first_run_id"] == "run-1" and doc["final_run"]["state"] == "SUCCEEDED"


def test_job_update_of_the_schedule_prints_the_next_fires() -> None:
    fake = FakeClient()
    result = invoke(["job", "update", "job-1", "--cron", "0 10 * * *"], obj=fake)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:2] == ["job        job-1", "version    8"]
    assert lines[2].startswith("next fire  2026-03-01 10:00:00 CET") and len(lines) == 5
    fake = FakeClient()
    result = invoke(["job", "update", "job-1", "--priority", "3"], obj=fake)
    assert result.stdout.splitlines() == ["job      job-1", "version  8"]
    assert "preview_fires" not in [c[0] for c in fake.calls]


class Crowded(FakeClient):
    """A fake whose node left workers and handler names out of its status."""

    def cluster_status(self) -> ClusterStatus:
        self._record("cluster_status")
        worker = WorkerInfo(
            id="w-1",
            address="10.0.0.5:7500",
            slots_total=4,
            slots_used=1,
            handlers=("a.one", "a.two"),
            handlers_omitted=948,
            owners=("team-a",),
            connected_at=T0,
        )
        return ClusterStatus(
            leader="n1", epoch=3, members=["n1"], shards=[], workers=[worker], workers_omitted=7
        )


def test_cluster_status_says_what_the_node_left_out() -> None:
    result = invoke(["cluster", "status"], obj=Crowded())
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    [row] = [line for line in lines if line.startswith("w-1")]
    assert "a.one,a.two (+948 more)" in row and "team-a" in row
    assert "… and 7 more workers" in lines
    as_json = json.loads(invoke(["--json", "cluster", "status"], obj=Crowded()).output)
    assert as_json["workers_omitted"] == 7
    assert as_json["workers"][0]["owners"] == ["team-a"]
