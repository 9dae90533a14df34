"""``--quota-file`` and ``--retention`` on a real ``shardcron dev``, through the CLI: runs
and their output parts in dev's blob store (``DATA_DIR/blobs``) deleted after it."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import DevServer
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    base = tmp_path_factory.mktemp("quota")
    quota_file = base / "quotas.toml"
    quota_file.write_text('[quota.owner."tiny"]\nmax_jobs = 1\n')
    server = DevServer(
        base / "data",
        extra=["--quota-file", str(quota_file), "--retention", "2s", "--lease-ttl", "3s"],
    ).start()
    yield server
    server.stop()


def test_a_create_past_max_jobs_is_refused_naming_the_limit(dev: DevServer) -> None:
    dev.cli("job", "create", "first", "--cron", "0 0 1 1 *", "--", "true", owner="tiny")
    refused = dev.cli("job", "create", "second", "--", "true", owner="tiny", check=False)
    assert refused.returncode != 0
    assert "max_jobs" in refused.stderr
    assert len(json.loads(dev.cli("--json", "job", "list", owner="tiny").stdout)) == 1


def test_final_runs_are_deleted_after_the_retention(dev: DevServer) -> None:
    owner = f"ret-{uuid.uuid4().hex[:8]}"
    job_id = dev.cli("job", "create", "-q", "once", "--", "echo", "hi", owner=owner).stdout.strip()

    def runs() -> list[dict]:
        return json.loads(dev.cli("--json", "run", "list", job_id, owner=owner).stdout)

    [run] = wait_until(lambda: [r for r in runs() if r["state"] == "SUCCEEDED"], what="a run")
    wait_until(lambda: runs() == [], timeout=60, what="the run deleted")
    gone = dev.cli("run", "get", run["id"], owner=owner, check=False)
    assert gone.returncode != 0
    assert json.loads(dev.cli("--json", "job", "get", job_id, owner=owner).stdout)["id"] == job_id


def test_a_runs_output_parts_are_deleted_with_it_and_a_running_runs_stay(
    dev: DevServer,
) -> None:
    owner = f"ret-{uuid.uuid4().hex[:8]}"

    def running_run(name: str) -> tuple[str, Path]:
        """A run printing then sleeping, once its first part is in the blob store."""
        command = ["sh", "-c", f"echo {name}; sleep 600"]
        job_id = dev.cli("job", "create", "-q", name, "--", *command, owner=owner).stdout
        job_id = job_id.strip()

        def running() -> list[dict]:
            runs = json.loads(dev.cli("--json", "run", "list", job_id, owner=owner).stdout)
            return [r for r in runs if r["state"] == "RUNNING"]

        [run] = wait_until(running, what=f"{name} running")
        parts = dev.data_dir / "blobs" / "output" / owner / run["id"]
        wait_until(lambda: any(p.is_file() for p in parts.rglob("*")), what=f"{name}'s parts")
        return run["id"], parts

    old_id, old_parts = running_run("old")
    new_id, new_parts = running_run("new")
    dev.cli("run", "cancel", old_id, owner=owner)  # final: deleted 2 s after it ended

    wait_until(lambda: not old_parts.exists(), timeout=60, what="the old run's parts deleted")
    assert dev.cli("run", "get", old_id, owner=owner, check=False).returncode != 0
    assert any(p.is_file() for p in new_parts.rglob("*"))  # still running: kept
    dev.cli("run", "cancel", new_id, owner=owner)


def test_a_bad_quota_file_stops_the_start_naming_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "q.toml"
    bad.write_text("[quota.default]\nmax_jobs = 0\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "shardcron",
            "dev",
            "--quota-file",
            str(bad),
            "--listen",
            "127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "quota.default.max_jobs" in result.stderr
