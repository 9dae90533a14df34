"""Real processes for end-to-end tests: ``shardcron dev`` and ``shardcron worker``.

Each process is started with the project's own interpreter, waited for through
the gRPC health service, and killed for real (SIGKILL) where a test asks.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from deploy.ports import free_port as free_port  # re-exported: the harnesses import it from here
from shardcron.client.sdk import Client
from shardcron.client.tls import TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV, ClientTls
from shardcron.v1 import worker_pb2

REPO = Path(__file__).resolve().parents[2]


def channel_to(target: str, tls: ClientTls | None = None) -> grpc.Channel:
    """A blocking channel to ``target``: TLS with ``tls`` (files given), else plaintext."""
    credentials = tls.credentials() if tls is not None else None
    if credentials is not None:
        return grpc.secure_channel(target, credentials)
    return grpc.insecure_channel(target)


def wait_healthy(
    target: str,
    timeout: float = 30.0,
    proc: subprocess.Popen[bytes] | None = None,
    tls: ClientTls | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    with channel_to(target, tls) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"process exited with {proc.returncode} before serving")
            try:
                resp = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{target} not serving after {timeout}s")
            time.sleep(0.1)


class Proc:
    """A shardcron subprocess with its log in a file."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.args = args
        self.log = log
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "shardcron", *self.args],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                env=self.env,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc is not None:
            # children of the group (commands the worker ran) go too
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class DevServer:
    """``shardcron dev`` on a free port with its own data dir. With ``tls`` (the
    server's TLS flags go in ``extra``) the harness's health checks, clients and CLI
    runs connect with those files."""

    def __init__(
        self, data_dir: Path, *, extra: list[str] | None = None, tls: ClientTls | None = None
    ) -> None:
        self.data_dir = data_dir
        self.tls = tls or ClientTls()
        self.port = free_port()
        self.metrics_port = free_port()
        self.http_port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.http_url = f"http://127.0.0.1:{self.http_port}"
        self.extra = extra or []
        self.proc: Proc | None = None
        self.starts = 0

    def start(self) -> DevServer:
        self.starts += 1
        args = [
            "dev",
            "--listen",
            self.target,
            "--data-dir",
            str(self.data_dir),
            "--metrics-listen",
            f"127.0.0.1:{self.metrics_port}",
            "--http-listen",
            f"127.0.0.1:{self.http_port}",
            *self.extra,
        ]
        self.proc = Proc(
            args, self.data_dir.parent / f"{self.data_dir.name}-dev-{self.starts}.log"
        ).start()
        try:
            wait_healthy(self.target, proc=self.proc.proc, tls=self.tls)
        except Exception:
            print(self.proc.output())
            raise
        return self

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def client(self, owner: str | None = None) -> Client:
        return Client(
            self.target,
            owner=owner or f"t-{uuid.uuid4().hex[:10]}",
            timeout=15,
            tls_ca=self.tls.ca,
            tls_cert=self.tls.cert,
            tls_key=self.tls.key,
        )

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as resp:
            return resp.read().decode()

    def cli(
        self, *args: str, owner: str = "default", check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "SHARDCRON_TARGET": self.target, "SHARDCRON_OWNER": owner}
        for name, path in (
            (TLS_CA_ENV, self.tls.ca),
            (TLS_CERT_ENV, self.tls.cert),
            (TLS_KEY_ENV, self.tls.key),
        ):
            if path is not None:
                env[name] = str(path)
        result = subprocess.run(
            [sys.executable, "-m", "shardcron", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=60,
            input=input,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"shardcron {' '.join(args)} exited {result.returncode}: {result.stderr}"
            )
        return result


def start_worker(target: str, log: Path, *args: str) -> Proc:
    return Proc(["worker", "--target", target, *args], log).start()


def heartbeat_empty(
    out: queue.Queue[worker_pb2.WorkerMessage | None], every: float = 0.2
) -> threading.Event:
    """Puts an empty ``Heartbeat`` on a hand-written worker's ``out`` every ``every``
    seconds until the returned event is set: the worker renews nothing, yet is heard
    from (one silent while it holds a lease is taken for frozen, its stream closed)."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            out.put(worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat()))

    threading.Thread(target=beat, daemon=True).start()
    return stop
