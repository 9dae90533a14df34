"""Owners kept apart where their commands run, with real processes and real users.

``shardcron dev`` as root (its data directory, key file and auth file where any user
could reach them, but for their modes) and a ``shardcron worker`` beside it that runs
each owner's commands as a uid of its own (``--run-as-range``), reads its token from a
file (``--token-file``) while ``SHARDCRON_TOKEN`` is also in its environment, and
passes its environment to commands (``--inherit-env``). Owner a's command runs with a
secret; owner b's tries to read it every way it could, and both try the worker's
token, the key file, the auth file and the store. Every read must be denied.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

import pytest

from shardcron.client.sdk import Client
from shardcron.client.types import CommandTask, JobSpec, Resources, RunState
from tests.e2e.harness import DevServer, Proc
from tests.support.auth import TOKENS, auth_file_text
from tests.support.containment import needs_root, shared_dir
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, needs_root]

SECRET = f"a-secret-{uuid.uuid4().hex}"
POOL = {"pool": "contained"}  # the jobs here go to the worker under test alone
# Each probe: what it tries, and the shell that tries it (it succeeds: read).
PROBES_OF_THE_WORKER = {
    "the worker's environment": 'cat "/proc/$WORKER/environ"',
    "the worker's token file": 'cat "$TOKEN_FILE"',
    "the secrets key file": 'cat "$KEY_FILE"',
    "the auth file": 'cat "$AUTH_FILE"',
    "the store": 'cat "$DATA/shardcron.db"',
    "the store's directory": 'ls "$DATA"',
    "the worker's token, inherited": 'test -n "$SHARDCRON_TOKEN"',
}
PROBES_OF_OWNER_A = {
    "a's environment": 'cat "/proc/$A/environ"',
    "a's working directory": 'ls "/proc/$A/cwd/"',
    "a's directory": 'ls "$A_HOME"',
    "a's secret file": 'cat "$A_HOME/secrets/PASS"',
    "a's secret through its cwd": 'cat "/proc/$A/cwd/secrets/PASS"',
    "a's memory": 'head -c 1 "/proc/$A/mem"',
}


def probe_script(probes: dict[str, str]) -> str:
    """Prints ``READ what`` or ``DENIED what`` for each probe."""
    return "".join(
        f'if {how} >/dev/null 2>&1; then echo "READ {what}"; else echo "DENIED {what}"; fi\n'
        for what, how in probes.items()
    )


def test_owners_read_nothing_of_each_other_nor_of_the_worker(tmp_path: Path) -> None:
    with shared_dir() as shared:  # what the commands must find: a's pid and directory
        secrets = shared / "secrets"  # a directory anyone may enter, the files 0600
        secrets.mkdir(mode=0o755)
        key_file, auth_file, token_file = (secrets / n for n in ("keys", "auth.toml", "token"))
        key_file.write_text(f"k1 {base64.b64encode(os.urandom(32)).decode()}\n")
        auth_file.write_text(auth_file_text(["admin", "worker-any"]))
        token_file.write_text(TOKENS["worker-any"] + "\n")
        for f in (key_file, auth_file, token_file):
            f.chmod(0o600)
        data = secrets / "data"  # dev runs commands as other users: it closes this
        dev = DevServer(
            data,
            extra=[
                "--workers",
                "1",
                "--auth-file",
                str(auth_file),
                "--secrets-key-file",
                str(key_file),
            ],
        ).start()
        worker = Proc(
            ["worker", "--target", dev.target, "--label", "pool=contained", "--inherit-env",
             "--token-file", str(token_file), "--run-as-range", "310000-310999"],
            tmp_path / "worker.log",
            env={"SHARDCRON_TOKEN": TOKENS["worker-any"]},
        ).start()  # fmt: skip
        try:
            wait_until(lambda: "connected to poller" in worker.output(), 30, "the worker")
            places = {
                "WORKER": str(worker.pid),
                "TOKEN_FILE": str(token_file),
                "KEY_FILE": str(key_file),
                "AUTH_FILE": str(auth_file),
                "DATA": str(data),
            }
            record = f'echo $$ > {shared}/a.pid; echo "$HOME" > {shared}/a.home; '
            with client(dev, "a") as a:
                held = a.create_job(
                    command(
                        record + probe_script(PROBES_OF_THE_WORKER) + "sleep 60",
                        env=places,
                        secret_env={"PASS": SECRET},
                    )
                )
                a_pid = int(wait_until(lambda: read(shared / "a.pid"), 30, "a's command"))
                a_home = wait_until(lambda: read(shared / "a.home"), 30, "a's directory")
            with client(dev, "b") as b:
                job = b.create_job(
                    command(
                        probe_script(PROBES_OF_OWNER_A | PROBES_OF_THE_WORKER),
                        env={**places, "A": str(a_pid), "A_HOME": a_home},
                    )
                )
                [run] = b.wait_job_runs(job.id, count=1, timeout=60)
                assert run.state == RunState.SUCCEEDED, run
                of_b = output(b, run.id)
            with client(dev, "a") as a:
                [running] = a.list_runs(held.id).items
                of_a = output(a, running.id)
                a.cancel_run(running.id)
            worker_log = worker.output()
        finally:
            worker.stop()
            dev.stop()
    lines = of_a.splitlines() + of_b.splitlines()
    denied = [line for line in lines if line.startswith("DENIED ")]
    probes = len(PROBES_OF_THE_WORKER) * 2 + len(PROBES_OF_OWNER_A)
    print(f"cross-owner and worker reads denied: {len(denied)} of {probes}")
    assert [line for line in lines if line.startswith("READ ")] == []
    assert len(denied) == probes
    assert SECRET not in of_b and TOKENS["worker-any"] not in of_a + of_b
    assert TOKENS["worker-any"] not in worker_log


def client(dev: DevServer, owner: str) -> Client:
    return Client(dev.target, owner=owner, token=TOKENS["admin"], timeout=15)


def command(script: str, **task: dict[str, str]) -> JobSpec:
    return JobSpec(
        name=f"probe-{uuid.uuid4().hex[:6]}",
        task=CommandTask(argv=("sh", "-c", script), **task),  # type: ignore[arg-type]
        resources=Resources(labels=POOL),
    )


def read(path: Path) -> str | None:
    text = path.read_text().strip() if path.exists() else ""
    return text or None


def output(c: Client, run_id: str) -> str:
    return b"".join(chunk.data for chunk in c.read_output(run_id)).decode()


def test_dev_running_commands_as_others_refuses_a_key_file_they_could_read(
    tmp_path: Path,
) -> None:
    """Its commands run as other users: a key file any user may read stops the start,
    naming the file and the fix; as itself (``--run-as-range none``) it starts."""
    with shared_dir() as shared:
        key_file = shared / "keys"
        key_file.write_text(f"k1 {base64.b64encode(os.urandom(32)).decode()}\n")
        key_file.chmod(0o644)
        refused = Proc(
            ["dev", "--data-dir", str(tmp_path / "data"), "--secrets-key-file", str(key_file),
             "--listen", "127.0.0.1:0", "--http-listen", "", "--metrics-listen", ""],
            tmp_path / "refused.log",
        ).start()  # fmt: skip
        assert refused.proc is not None and refused.proc.wait(30) != 0
        assert f"the secrets key file {key_file} can be read by other users" in refused.output()
        assert "chmod o-r" in refused.output()
        itself = DevServer(
            tmp_path / "data",
            extra=["--secrets-key-file", str(key_file), "--run-as-range", "none"],
        ).start()
        itself.stop()
