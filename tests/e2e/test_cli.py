"""The ``shardcron`` CLI as a user types it, against a real ``shardcron dev``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid

from tests.e2e.harness import DevServer
from tests.support.waiting import wait_until


def owner() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}"


def _stacks(pid: int) -> str:
    """What a process that does not end is doing (py-spy's dump of every thread)."""
    spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    dump = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, timeout=30)
    return (dump.stdout + dump.stderr).decode(errors="replace")


def test_cron_job_tour(dev: DevServer) -> None:
    o = owner()
    job_id = dev.cli(
        "job",
        "create",
        "-q",
        "tick",
        "--cron",
        "* * * * * *",
        "--",
        "sh",
        "-c",
        "echo tick",
        owner=o,
    ).stdout.strip()
    assert len(job_id) == 36

    listed = json.loads(dev.cli("--json", "job", "list", owner=o).stdout)
    assert [j["id"] for j in listed] == [job_id]
    assert listed[0]["spec"]["schedule"]["cron"] == "* * * * * *"

    def runs() -> list[dict]:
        out = json.loads(dev.cli("--json", "run", "list", job_id, owner=o).stdout)
        return [r for r in out if r["state"] == "SUCCEEDED"]

    done = wait_until(runs, what="a SUCCEEDED run")
    logs = dev.cli("run", "logs", done[0]["id"], owner=o).stdout
    assert logs == "tick\n"
    table = dev.cli("run", "list", job_id, owner=o).stdout
    assert "SUCCEEDED" in table.splitlines()[-1] or "SUCCEEDED" in table

    dev.cli("job", "pause", job_id, owner=o)
    assert json.loads(dev.cli("--json", "job", "get", job_id, owner=o).stdout)["state"] == "PAUSED"
    dev.cli("job", "resume", job_id, owner=o)
    dev.cli("job", "delete", job_id, owner=o)
    assert json.loads(dev.cli("--json", "job", "get", job_id, owner=o).stdout)["state"] == "DELETED"


def test_follow_and_cancel_a_running_command(dev: DevServer) -> None:
    o = owner()
    job_id = dev.cli(
        "job", "create", "-q", "long", "--", "sh", "-c", "echo begin; sleep 60", owner=o
    ).stdout.strip()

    def running() -> str:
        out = json.loads(dev.cli("--json", "run", "list", job_id, owner=o).stdout)
        return next((r["id"] for r in out if r["state"] == "RUNNING"), "")

    run_id = wait_until(running, what="RUNNING")
    dev.cli("run", "cancel", run_id, owner=o)
    follow = dev.cli("run", "logs", "-f", run_id, owner=o)
    assert "begin" in follow.stdout
    waited = dev.cli("run", "wait", run_id, owner=o, check=False)
    assert waited.returncode == 1
    assert (
        json.loads(dev.cli("--json", "run", "get", run_id, owner=o).stdout)["state"] == "CANCELLED"
    )


def test_preview_shows_local_and_utc_times(dev: DevServer) -> None:
    out = dev.cli(
        "--json", "job", "preview", "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "--count", "3"
    ).stdout
    fires = json.loads(out)
    assert len(fires) == 3
    assert all("T02:30:00" in f["local"] or "T03:00:00" in f["local"] for f in fires)


def test_bad_input_exits_2_naming_the_field(dev: DevServer) -> None:
    bad = dev.cli(
        "job", "create", "bad", "--cron", "61 * * * *", "--", "true", owner=owner(), check=False
    )
    assert bad.returncode == 2
    assert "spec.schedule.cron" in bad.stderr
    assert "Traceback" not in bad.stderr
    missing = dev.cli("job", "get", "0190f0f0-0000-7000-8000-000000000000", check=False)
    assert missing.returncode == 3


def test_cluster_status_shows_the_dev_node(dev: DevServer) -> None:
    status = json.loads(dev.cli("--json", "cluster", "status").stdout)
    assert status["mode"] == "dev"
    assert status["epoch"] >= 1
    assert len(status["shards"]) == 64
    assert {w["id"] for w in status["workers"]} == {"dev-worker-0", "dev-worker-1"}


def test_create_wait_then_logs_and_list_by_job_id(dev: DevServer) -> None:
    o = owner()
    created = dev.cli(
        "job", "create", "hi", "--wait", "--", "sh", "-c", "echo hi; sleep 0.2", owner=o
    )  # fmt: skip
    lines = created.stdout.splitlines()
    job_id = lines[0].split()[1]
    run_id = lines[1].split()[2]
    assert lines[-1] == f"{run_id} SUCCEEDED"
    assert dev.cli("run", "logs", job_id, owner=o).stdout == "hi\n"
    assert dev.cli("run", "wait", job_id, owner=o).stdout == f"{run_id} SUCCEEDED\n"
    table = dev.cli("run", "list", job_id, owner=o).stdout.splitlines()
    assert max(len(line) for line in table) <= 120 and job_id not in "\n".join(table)
    assert json.loads(dev.cli("run", "list", job_id, "--json", owner=o).stdout)[0]["id"] == run_id
    failed = dev.cli(
        "job", "create", "-q", "no", "--wait", "--max-attempts", "1", "--", "false",
        owner=o, check=False,
    )  # fmt: skip
    assert failed.returncode == 1 and failed.stdout.splitlines()[-1].endswith(" FAILED")
    listed = dev.cli("job", "list", owner=o).stdout
    assert "COMPLETED" in listed and "FAILED" in listed
    # the failed job's strip and rate, as the node read them with the list
    [no] = [
        j
        for j in json.loads(dev.cli("--json", "job", "list", owner=o).stdout)
        if j["spec"]["name"] == "no"
    ]
    assert [r["state"] for r in no["health"]["runs"]] == ["FAILED"]
    assert (no["health"]["rated"], no["health"]["success_rate"]) == (1, 0.0)
    row = next(line for line in listed.splitlines() if " no " in line)
    assert "0% of 1" in row and ("✗" in row or " x " in row)


def test_ctrl_c_while_following_exits_130_quietly(dev: DevServer) -> None:
    """Regression: Ctrl-C in ``run logs -f`` printed "Aborted!" and exited 1."""
    o = owner()
    job_id = dev.cli(
        "job", "create", "-q", "long", "--", "sh", "-c", "echo begin; sleep 60", owner=o
    ).stdout.strip()
    env = {**os.environ, "SHARDCRON_TARGET": dev.target, "SHARDCRON_OWNER": o}
    follow = subprocess.Popen(
        [sys.executable, "-m", "shardcron", "run", "logs", "-f", job_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert follow.stdout is not None
    assert follow.stdout.readline() == b"begin\n"  # following, past the start-up
    follow.send_signal(signal.SIGINT)
    try:
        _, err = follow.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        stacks = _stacks(follow.pid)
        follow.kill()
        raise AssertionError(f"still running 30 s after SIGINT; its threads:\n{stacks}") from None
    assert follow.returncode == 130
    assert b"Aborted" not in err and b"Traceback" not in err
    dev.cli("job", "delete", job_id, "--cancel-running", owner=o)
