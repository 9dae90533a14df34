"""``shardcron dev`` with an auth file, as real processes (issue 12): a worker process of
owner a's pool never gets owner b's runs, the CLI's token flags, the in-process workers
still trusted, SIGHUP reloading the file, and a bad file refused at start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from shardcron.client.errors import ShardcronError
from shardcron.client.sdk import Client
from shardcron.client.types import CommandTask, JobSpec, RunState, Schedule
from tests.e2e.harness import REPO, DevServer, Proc
from tests.support.auth import OTHER, OWN, TOKENS, auth_file_text, principal_toml
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e
WAIT = 60.0


def marker_job(directory: Path, name: str) -> JobSpec:
    """A command that leaves a file named after its run: proof that it ran."""
    return JobSpec(
        name=name,
        task=CommandTask(argv=("sh", "-c", f'touch "{directory}/$SHARDCRON_RUN_ID"')),
        schedule=Schedule.immediate(),
    )


def run_of(client: Client, job_id: str):  # type: ignore[no-untyped-def]
    [run] = client.list_runs(job_id).items
    return run


def test_a_worker_process_of_one_owner_never_runs_another_owners_run(tmp_path: Path) -> None:
    auth = tmp_path / "auth.toml"
    auth.write_text(auth_file_text(["admin", "worker"]))
    dev = DevServer(tmp_path / "data", extra=["--workers", "0", "--auth-file", str(auth)]).start()
    ran = tmp_path / "ran"
    ran.mkdir()
    worker = Proc(
        ["worker", "--target", dev.target, "--slots", "4"],
        tmp_path / "worker.log",
        env={"SHARDCRON_TOKEN": TOKENS["worker"]},  # worker's pool: owner a
    ).start()
    try:
        with (
            Client(dev.target, owner=OTHER, token=TOKENS["admin"]) as as_b,
            Client(dev.target, owner=OWN, token=TOKENS["admin"]) as as_a,
        ):
            theirs = as_b.create_job(marker_job(ran, "b"))
            ours = as_a.create_job(marker_job(ran, "a"))
            wait_until(
                lambda: run_of(as_a, ours.id).state == RunState.SUCCEEDED, WAIT, "a's run done"
            )
            # b's run was due first, and the worker had free slots all along
            waiting = as_b.get_run(run_of(as_b, theirs.id).id)
            assert waiting.state == RunState.PENDING and waiting.worker_id == ""
            assert waiting.waiting_reason == f"no connected worker takes runs of owner {OTHER}"
            assert sorted(p.name for p in ran.iterdir()) == [run_of(as_a, ours.id).id]
    finally:
        worker.stop()
        dev.stop()


def cli(dev: DevServer, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardcron", "--target", dev.target, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=REPO,
        timeout=60,
    )


def test_the_auth_file_is_reloaded_on_sighup_and_a_bad_one_keeps_the_last(
    tmp_path: Path,
) -> None:
    auth = tmp_path / "auth.toml"
    auth.write_text(auth_file_text(["writer"]))
    dev = DevServer(tmp_path / "data", extra=["--workers", "1", "--auth-file", str(auth)]).start()
    try:
        # the CLI with its token (the env var): the in-process worker runs the job
        created = cli(
            dev, "--json", "job", "create", "hi", "--", "true",
            env={"SHARDCRON_TOKEN": TOKENS["writer"]},
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        job_id = json.loads(created.stdout)["id"]
        with Client(dev.target, token=TOKENS["writer"]) as writer:
            wait_until(
                lambda: run_of(writer, job_id).state == RunState.SUCCEEDED, WAIT, "the run done"
            )
        refused = cli(dev, "job", "list", env={"SHARDCRON_TOKEN": ""})
        assert refused.returncode != 0 and "UNAUTHENTICATED" in refused.stderr

        # the writer's token is replaced by a new one
        auth.write_text(principal_toml("writer", "writer", [OWN], "new-token"))
        dev.proc.signal(signal.SIGHUP)  # type: ignore[union-attr]

        def old_token_refused() -> bool:
            with Client(dev.target, token=TOKENS["writer"]) as old:
                try:
                    old.list_jobs()
                except ShardcronError as e:
                    return e.code == "UNAUTHENTICATED"
                return False

        wait_until(old_token_refused, WAIT, "the old token refused")
        with Client(dev.target, token="new-token") as new:
            assert [j.id for j in new.list_jobs().items] == [job_id]

        # a file that does not load is logged, and the principals in force are kept
        auth.write_text("[[principal]\nbroken")
        dev.proc.signal(signal.SIGHUP)  # type: ignore[union-attr]
        wait_until(
            lambda: "auth file not reloaded" in dev.proc.output(),  # type: ignore[union-attr]
            WAIT,
            "the bad file logged",
        )
        listed = cli(dev, "--token", "new-token", "job", "list", env={})
        assert listed.returncode == 0 and job_id in listed.stdout
    finally:
        dev.stop()


def test_a_bad_auth_file_stops_the_start_naming_the_line_and_field(tmp_path: Path) -> None:
    auth = tmp_path / "auth.toml"
    auth.write_text(auth_file_text(["admin"]) + '\n[[principal]]\nname = "x"\nrole = "boss"\n')
    result = subprocess.run(
        [sys.executable, "-m", "shardcron", "dev", "--auth-file", str(auth),
         "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0", "--metrics-listen", ""],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert f"{auth} line 6, principal[1] (x): role: 'boss' is not one of" in result.stderr
