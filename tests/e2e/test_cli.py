"""The ``shardcron`` CLI as a user types it, against a real ``shardcron dev``."""

from __future__ import annotations

import json
import uuid

from tests.e2e.harness import DevServer
from tests.support.waiting import wait_until


def owner() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}"


def test_cron_job_tour(dev: DevServer) -> None:
    o = owner()
    job_id = dev.cli(
        "job", "create", "tick", "--cron", "* * * * * *", "--", "sh", "-c", "echo tick", owner=o
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
        "job", "create", "long", "--", "sh", "-c", "echo begin; sleep 60", owner=o
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
