"""``--quota-file`` and ``--retention`` on a real ``shardcron dev``, through the CLI."""

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
