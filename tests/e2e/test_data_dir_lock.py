"""One process per data directory: a second ``shardcron dev`` on the same directory
exits at start naming the holder, and the lock goes with its holder, even by SIGKILL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from shardcron.client.types import CommandTask, JobSpec, RunState
from tests.e2e.harness import REPO, DevServer, free_port
from tests.support.waiting import wait_until


def _second_dev(data_dir: Path) -> subprocess.CompletedProcess[str]:
    port = free_port()
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "shardcron",
            "dev",
            "--listen",
            f"127.0.0.1:{port}",
            "--data-dir",
            str(data_dir),
            "--metrics-listen",
            "",
            "--workers",
            "0",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


def test_two_nodes_on_one_data_directory_cannot_both_run(tmp_path: Path) -> None:
    first = DevServer(tmp_path / "data", extra=["--workers", "0"]).start()
    try:
        second = _second_dev(first.data_dir)
        assert second.returncode != 0
        assert f"in use by pid {first.proc.pid}" in second.stderr, second.stderr
        # it stopped before serving: the first one still answers, and alone
        with first.client() as c:
            assert c.cluster_status() is not None
    finally:
        first.stop()


def test_the_data_directory_is_free_again_after_its_holder_is_killed(tmp_path: Path) -> None:
    first = DevServer(tmp_path / "data", extra=["--workers", "1"]).start()
    with first.client() as c:
        # a command still running when its node is killed must not keep the lock
        job = c.create_job(JobSpec(name="held", task=CommandTask(argv=["sleep", "30"])))
        wait_until(lambda: [r for r in c.list_runs(job.id).items if r.state == RunState.RUNNING])
    first.kill()
    assert (first.data_dir / "lock").read_text().strip() == str(first.proc.pid)
    again = DevServer(first.data_dir, extra=["--workers", "0"]).start()
    try:
        assert (again.data_dir / "lock").read_text().strip() == str(again.proc.pid)
    finally:
        again.stop()
        first.stop()  # whatever of its process group is left
