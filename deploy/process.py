"""Server processes: detached starts, liveness that survives pid reuse, and probes.

A server is started in its own session so that it outlives its caller (the CLI or
a pytest session); whether it still runs is read from the Popen object when this
process started it, else from ``/proc``, always checking the command line so that
a stale pid never makes us signal an unrelated process.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from pathlib import Path

# Servers this process started. Holding the Popen objects keeps Python from
# warning "subprocess N is still running" when they are garbage collected, and
# lets pid_alive() reap a node we killed instead of leaving a zombie.
_CHILDREN: dict[int, subprocess.Popen] = {}


def spawn_detached(
    cmd: list[str], cwd: Path, output: Path, env: dict[str, str] | None = None
) -> int:
    """Start cmd in its own session so it outlives the caller (CLI or pytest), with
    ``env`` added to this process's environment.

    stdin is /dev/null and stdout/stderr go to a file, so nothing ties the
    server to the caller's terminal or pipes.
    """
    with open(output, "ab") as out:
        proc = subprocess.Popen(
            cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True, env={**os.environ, **(env or {})},
        )  # fmt: skip
    _CHILDREN[proc.pid] = proc
    return proc.pid


def pid_alive(pid: int | None, must_contain: str) -> bool:
    """True while the server process pid (whose command line mentions
    must_contain, normally the node's dir) has not completely exited.

    For a child of this process Popen.poll() is exact, and also reaps it so a
    killed node does not linger as a zombie. For a server started by another
    process (e.g. the CLI) /proc is read instead.
    """
    if not pid:
        return False
    proc = _CHILDREN.get(pid)
    if proc is not None:
        if proc.poll() is None:
            return must_contain in " ".join(proc.args)
        del _CHILDREN[pid]
        return False
    return _proc_alive(pid, must_contain)


def _proc_alive(pid: int, must_contain: str) -> bool:
    """Liveness from /proc, careful about three traps met in practice:

    * pid reuse: a stale pid file must never make us signal an unrelated
      process, hence the command-line check;
    * a JVM that is exiting: its main thread is already a zombie with an empty
      command line while other threads still hold its sockets open, so it
      counts as alive until the last thread is gone;
    * right after exec the command line also reads empty for a moment.
    """
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    name, state = fields["Name"].strip(), fields["State"].split()[0]
    if state == "Z" and int(fields["Threads"]) <= 1:
        return False  # fully exited; only its parent's wait() is missing
    if not cmdline:
        return name in ("java", "setpriv")
    return must_contain in cmdline


def rss_mib(pid: int) -> float:
    """Resident set size from /proc, in MiB (0 when the process is gone)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def tail(path: Path, lines: int = 30) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return f"({path} missing)"
