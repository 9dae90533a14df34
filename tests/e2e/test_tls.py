"""TLS as a user deploys it: a real ``shardcron dev`` requiring client certificates
(mTLS), the CLI and a real ``shardcron worker`` process connecting with their flags, and
the rule that keeps a node from serving plaintext beyond loopback.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardcron.client.types import CommandTask, JobSpec, RunState
from tests.e2e.harness import REPO, DevServer, Proc, free_port, start_worker, wait_healthy
from tests.support.certs import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def mtls_dev(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[DevServer]:
    """``shardcron dev`` with mTLS and no in-process workers: runs need a real worker."""
    server = DevServer(
        tmp_path_factory.mktemp("mtls") / "data",
        extra=["--workers", "0", "--lease-ttl", "3s", *pki.node_args(mtls=True)],
        tls=pki.client_tls("alice"),
    ).start()
    yield server
    server.stop()


def owner() -> str:
    return f"tls-{uuid.uuid4().hex[:8]}"


def shardcron(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardcron", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


def test_cli_and_a_worker_process_over_mtls(mtls_dev: DevServer, pki: Pki, tmp_path: Path) -> None:
    worker = start_worker(
        mtls_dev.target, tmp_path / "worker.log", "--id", "tls-w1", *pki.client_args("worker")
    )
    try:
        o = owner()
        # the flags as a user types them, not the environment the harness sets
        flags = ["--target", mtls_dev.target, "--owner", o, *pki.client_args("alice")]
        created = shardcron(
            *flags, "job", "create", "-q", "hello", "--", "sh", "-c", "echo over tls"
        )
        assert created.returncode == 0, created.stderr
        job_id = created.stdout.strip()
        [run] = json.loads(shardcron(*flags, "--json", "run", "list", job_id).stdout)
        waited = shardcron(*flags, "--json", "run", "wait", run["id"], "--timeout", "60s")
        assert waited.returncode == 0, waited.stderr + worker.output()
        assert json.loads(waited.stdout)["state"] == "SUCCEEDED"
        assert shardcron(*flags, "run", "logs", run["id"]).stdout == "over tls\n"
    finally:
        worker.stop()


def test_the_cli_without_a_client_certificate_is_refused(mtls_dev: DevServer, pki: Pki) -> None:
    listed = shardcron("--target", mtls_dev.target, "--tls-ca", str(pki.ca), "job", "list")
    assert listed.returncode != 0
    assert "UNAVAILABLE" in listed.stderr


def test_the_cli_in_plaintext_to_a_tls_port_is_refused(mtls_dev: DevServer) -> None:
    listed = shardcron("--target", mtls_dev.target, "--timeout", "5", "job", "list")
    assert listed.returncode != 0
    assert "UNAVAILABLE" in listed.stderr


def test_dev_in_process_workers_connect_over_mtls(tmp_path: Path, pki: Pki) -> None:
    server = DevServer(
        tmp_path / "data",
        extra=["--workers", "1", *pki.node_args(mtls=True)],
        tls=pki.client_tls("alice"),
    ).start()
    try:
        with server.client(owner()) as client:
            job = client.create_job(JobSpec(name="in-process", task=CommandTask(argv=("true",))))
            [run] = client.wait_job_runs(job.id, count=1, timeout=30)
            assert run.state == RunState.SUCCEEDED
    finally:
        server.stop()


def test_dev_refuses_plaintext_beyond_loopback(tmp_path: Path) -> None:
    started = shardcron(
        "dev",
        "--listen",
        f"0.0.0.0:{free_port()}",
        "--data-dir",
        str(tmp_path / "data"),
        "--metrics-listen",
        "",
    )
    assert started.returncode != 0
    assert "not a loopback address" in started.stderr and "--insecure" in started.stderr


def test_node_refuses_plaintext_beyond_loopback() -> None:
    """Before it connects to anything: the ZooKeeper and Cassandra named are never reached."""
    started = shardcron(
        "node",
        "--zk",
        "127.0.0.1:1",
        "--cassandra",
        "127.0.0.1",
        "--listen",
        f"0.0.0.0:{free_port()}",
    )
    assert started.returncode != 0
    assert "not a loopback address" in started.stderr and "--insecure" in started.stderr


def test_insecure_serves_plaintext_beyond_loopback(tmp_path: Path) -> None:
    port = free_port()
    args = ["dev", "--listen", f"0.0.0.0:{port}", "--insecure", "--workers", "0"]
    args += ["--data-dir", str(tmp_path / "data"), "--metrics-listen", ""]
    server = Proc(args, tmp_path / "dev.log").start()
    try:
        wait_healthy(f"127.0.0.1:{port}", proc=server.proc)
    finally:
        server.stop()
