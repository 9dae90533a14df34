"""The Versity S3 gateway (versitygw, Apache-2.0): an S3-compatible service on this machine.

The blob store's tests run ``S3BlobStore`` against it, over its POSIX backend: each
bucket a directory of ``DIR/data``, each object a file (on a file system with
extended attributes: ext4, xfs, tmpfs).

It is built from source, once per machine, by ``go install`` of the pinned version
through the Go module proxy (``fetch_versitygw``, ``python3 -m deploy fetch
versitygw``: about 2 minutes on 2 cores, then cached as
``$SHARDCRON_CACHE/bin/versitygw-<version>``). Version 1.8.0's go.mod asks for Go
1.25 or later: ``go`` on PATH or ``/usr/local/go/bin/go``; when there is none,
Debian's ``golang-go`` is installed with apt-get, and when the Go found is older,
the fetch fails saying which it found (``GOTOOLCHAIN=local``: no toolchain is
downloaded behind the caller's back).

``VersityGateway(DIR).start(buckets=[...])`` starts it on 127.0.0.1 (a free port
unless one is given) and returns once its health endpoint answers. Its root
credentials go through the environment (``ROOT_ACCESS_KEY``, ``ROOT_SECRET_KEY``),
never its command line: a random pair is made on first start and kept in
``DIR/access_key`` and ``DIR/secret_key`` (mode 0600), the files a store's
``SHARDCRON_BLOB_ACCESS_KEY_FILE`` and ``SHARDCRON_BLOB_SECRET_KEY_FILE`` name.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from deploy.errors import ServerError, log
from deploy.ports import free_port as free_port  # re-exported: the blob tests import it from here
from deploy.process import pid_alive, spawn_detached, tail
from deploy.tools import cache_dir

VERSION = "1.8.0"
MODULE = "github.com/versity/versitygw/cmd/versitygw"
MIN_GO = (1, 25)  # versitygw 1.8.0's go.mod
HEALTH_PATH = "/health"


def binary_path() -> Path:
    return cache_dir() / "bin" / f"versitygw-{VERSION}"


def find_go() -> str | None:
    for go in (shutil.which("go"), "/usr/local/go/bin/go"):
        if go and os.access(go, os.X_OK):
            return go
    return None


def go_version(go: str) -> tuple[int, int]:
    """(major, minor) of a Go toolchain: (1, 26) for go1.26.8; (0, 0) when unreadable."""
    out = subprocess.run([go, "version"], capture_output=True, text=True).stdout
    match = re.search(r"go(\d+)\.(\d+)", out)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def _install_go() -> str:
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    log("no go found: installing golang-go with apt-get")
    subprocess.run(sudo + ["apt-get", "update", "-q"], check=True, env=env)
    subprocess.run(
        sudo + ["apt-get", "install", "-y", "-q", "--no-install-recommends", "golang-go"],
        check=True,
        env=env,
    )
    go = find_go()
    if go is None:
        raise ServerError("apt-get installed golang-go but no go is on PATH")
    return go


def fetch_versitygw() -> Path:
    """The versitygw binary, built with ``go install`` on first call (a file lock lets
    parallel processes share one build); later calls return the cached binary."""
    target = binary_path()
    if os.access(target, os.X_OK):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.access(target, os.X_OK):  # another process built it meanwhile
            return target
        go = find_go() or _install_go()
        found = go_version(go)
        if found < MIN_GO:
            raise ServerError(
                f"versitygw {VERSION} needs Go {MIN_GO[0]}.{MIN_GO[1]} or later; {go} is"
                f" {found[0]}.{found[1]} (Debian 12's golang-go is 1.19): put a newer go on PATH"
            )
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        env = dict(os.environ, GOBIN=str(partial), GOFLAGS="-buildvcs=false", GOTOOLCHAIN="local")
        log(f"building versitygw {VERSION} with {go} (go install: about 2 minutes)")
        started = time.monotonic()
        result = subprocess.run(
            [go, "install", f"{MODULE}@v{VERSION}"], env=env, capture_output=True, text=True
        )
        if result.returncode != 0:
            raise ServerError(f"go install {MODULE}@v{VERSION} failed:\n{result.stderr[-3000:]}")
        (partial / "versitygw").rename(target)
        shutil.rmtree(partial, ignore_errors=True)
        log(f"built {target} in {time.monotonic() - started:.0f}s")
    return target


class VersityGateway:
    """One versitygw process serving ``DIR/data`` on ``host:port``."""

    start_timeout = 60.0
    stop_grace = 10.0

    def __init__(self, dir: str | os.PathLike, port: int = 0, host: str = "127.0.0.1"):
        self.dir = Path(dir).resolve()
        self.host = host
        self.port = port
        self.data_dir = self.dir / "data"
        self.log_file = self.dir / "versitygw.log"
        self.pid_file = self.dir / "pid"
        self.access_key_file = self.dir / "access_key"
        self.secret_key_file = self.dir / "secret_key"

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid, str(self.data_dir)) else None

    def start(self, buckets: tuple[str, ...] | list[str] = ()) -> VersityGateway:
        """Starts the gateway (unless it runs) with ``buckets`` present and waits until
        it answers."""
        binary = fetch_versitygw()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for bucket in buckets:  # a bucket of the POSIX backend is a directory of DATA
            (self.data_dir / bucket).mkdir(exist_ok=True)
        if self.pid() is not None:
            return self
        access_key, secret_key = self._credentials()
        if not self.port:
            self.port = free_port(self.host)
        command = [
            str(binary),
            "--port", f"{self.host}:{self.port}",
            "--health", HEALTH_PATH,
            "--quiet",
            "posix", str(self.data_dir),
        ]  # fmt: skip
        env = {"ROOT_ACCESS_KEY": access_key, "ROOT_SECRET_KEY": secret_key}
        pid = spawn_detached(command, cwd=self.dir, output=self.log_file, env=env)
        self.pid_file.write_text(f"{pid}\n")
        deadline = time.monotonic() + self.start_timeout
        while not self._healthy():
            if not pid_alive(pid, str(self.data_dir)):
                raise ServerError(f"versitygw exited at start:\n{tail(self.log_file)}")
            if time.monotonic() > deadline:
                self.stop(grace=0)
                raise ServerError(
                    f"versitygw did not answer on {self.endpoint}{HEALTH_PATH} within"
                    f" {self.start_timeout:.0f}s:\n{tail(self.log_file)}"
                )
            time.sleep(0.1)
        log(f"versitygw {VERSION} serves {self.data_dir} on {self.endpoint}")
        return self

    def stop(self, grace: float | None = None) -> None:
        """SIGTERM, up to ``grace`` seconds (default ``stop_grace``), then SIGKILL."""
        pid = self.pid()
        if pid is None:
            return
        grace = self.stop_grace if grace is None else grace
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM if grace > 0 else signal.SIGKILL)
        deadline = time.monotonic() + grace
        while pid_alive(pid, str(self.data_dir)):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 10
            time.sleep(0.05)
        self.pid_file.unlink(missing_ok=True)

    def _credentials(self) -> tuple[str, str]:
        """The root key pair, made on first start and kept in two 0600 files."""
        self.dir.mkdir(parents=True, exist_ok=True)
        for path, make in (
            (self.access_key_file, lambda: "sc" + secrets.token_hex(9)),
            (self.secret_key_file, lambda: secrets.token_urlsafe(30)),
        ):
            if not path.exists():
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(make() + "\n")
        return (
            self.access_key_file.read_text().strip(),
            self.secret_key_file.read_text().strip(),
        )

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint + HEALTH_PATH, timeout=1) as answer:
                return answer.status == 200
        except (urllib.error.URLError, OSError):
            return False
