"""What every system's runner shares: results, CPU accounting, percentiles, processes.

A runner returns one ``Result`` per (system, workload) run. CPU is counted per role
("scheduler", "store", "broker", "workers", "client", ...) from the processes the
runner started, read with psutil at the end of the measured span (before any of them
is stopped), minus what they had used when the span began. A part of a role (a JVM's
compiler threads: ``CpuMeter``'s ``parts``) is reported beside it under a name that
says so, ``"<part> of <role>"``, and not counted again in the total.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.outcomes import Result as Result  # re-exported: the runners import it from here
from bench.workloads import percentiles as percentiles  # re-exported, as Result
from deploy.ports import free_port as free_port  # re-exported, as Result


def metric_total(urls: Iterable[str], name: str) -> float:
    """The sum of every sample of metric ``name`` over shardcron nodes' /metrics pages,
    each asked for that metric alone (``name[]``, prometheus-client's filter): a whole
    page holds a node's interpreter lock for a while, and completion is polled every
    few milliseconds at the end of a W1."""
    total = 0.0
    query = urllib.parse.urlencode({"name[]": name})
    for url in urls:
        with urllib.request.urlopen(f"{url}?{query}", timeout=5) as r:
            families = text_string_to_metric_families(r.read().decode())
        total += sum(s.value for f in families for s in f.samples if s.name == name)
    return total


def wait_until_metric(urls: Sequence[str], name: str, at_least: float, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while metric_total(urls, name) < at_least:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} stayed below {at_least} for {timeout:.0f}s")
        time.sleep(0.1)


FINE_FROM = 0.9  # wait_ended: the share of runs ended past which it polls finely
FINE_POLL = 0.005


def wait_ended(
    urls: Sequence[str], n: int, timeout: float, poll: float = 0.05
) -> tuple[int, float]:
    """Polls shardcron's ended-runs counter until ``n`` runs ended or ``timeout`` passed;
    returns (runs ended, when the last of them was seen). Past ``FINE_FROM`` of ``n`` it
    polls every ``FINE_POLL`` seconds: a W1 on the embedded store ends within a second,
    and a ``poll``-sized step at its end was up to a tenth of its time, where Celery's
    completion is its results' exact ``date_done``."""
    deadline = time.monotonic() + timeout
    done, at = 0, time.time()
    while time.monotonic() < deadline:
        seen = int(metric_total(urls, "shardcron_runs_final_total"))
        if seen != done:
            done, at = seen, time.time()
        if done >= n:
            break
        time.sleep(min(poll, FINE_POLL) if done >= FINE_FROM * n else poll)
    return done, at


PART_OF = " of "  # in a figure's name: a part of a role's CPU, already in its total


def thread_seconds(pid: int, prefixes: tuple[str, ...]) -> dict[int, float]:
    """CPU seconds used so far by each thread of ``pid`` whose name (``comm``) starts
    with one of ``prefixes``, read from ``/proc`` (user and system time); {} once the
    process is gone."""
    seconds: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return seconds
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue  # the thread ended
        # pid (comm) state ...: the name may hold spaces and parentheses, so it ends
        # at the last ")"; utime and stime are the 12th and 13th fields after it
        head, _, fields = stat.rpartition(")")
        if head[head.index("(") + 1 :].startswith(prefixes):
            f = fields.split()
            seconds[int(tid)] = (int(f[11]) + int(f[12])) / tick
    return seconds


class CpuMeter:
    """CPU seconds used by groups of processes (each with its descendants, live and
    reaped, except the harness's own process, counted alone) over a span. A descendant
    that ended unreaped by a process of the tree (its parent ignored SIGCHLD) is not
    counted. ``parts``: name -> (pids, thread name prefixes), the CPU of those threads
    of those processes, a part of a role, reported under its name (which holds
    ``PART_OF``); a thread that ends within the span is not counted in it."""

    def __init__(
        self,
        roles: dict[str, Iterable[int]],
        parts: dict[str, tuple[Iterable[int], tuple[str, ...]]] | None = None,
    ) -> None:
        self._roles = {role: list(pids) for role, pids in roles.items()}
        self._parts = {name: (list(p), prefixes) for name, (p, prefixes) in (parts or {}).items()}
        assert all(PART_OF in name for name in self._parts), "a part's name says whose"
        self._start: dict[str, float] = {}
        self._part_start: dict[str, dict[tuple[int, int], float]] = {}

    def _part_threads(self, name: str) -> dict[tuple[int, int], float]:
        pids, prefixes = self._parts[name]
        return {(pid, tid): s for pid in pids for tid, s in thread_seconds(pid, prefixes).items()}

    @staticmethod
    def _tree_seconds(pids: Iterable[int]) -> float:
        import psutil  # the bench extra: the tests import this module without it

        total = 0.0
        seen: set[int] = set()
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(pid)
                # this process alone: the servers and workers it started are its children
                tree = [root] if pid == os.getpid() else [root, *root.children(recursive=True)]
                for p in tree:
                    if p.pid in seen:
                        continue
                    seen.add(p.pid)
                    with contextlib.suppress(psutil.Error):
                        t = p.cpu_times()
                        # and its children it reaped: a worker's commands, spawned and
                        # waited for by their supervisors, are counted there
                        total += t.user + t.system + t.children_user + t.children_system
        return total

    def start(self) -> None:
        self._start = {role: self._tree_seconds(p) for role, p in self._roles.items()}
        self._part_start = {name: self._part_threads(name) for name in self._parts}

    def stop(self) -> dict[str, float]:
        """CPU seconds per role since ``start``, and per part."""
        out = {
            role: max(0.0, self._tree_seconds(p) - self._start.get(role, 0.0))
            for role, p in self._roles.items()
        }
        for name in self._parts:
            before = self._part_start.get(name, {})
            now = self._part_threads(name)
            out[name] = sum(max(0.0, s - before.get(key, 0.0)) for key, s in now.items())
        return out


def per_1000(cpu: dict[str, float], n: int) -> dict[str, float]:
    out = {role: s * 1000.0 / n for role, s in cpu.items()} if n else {}
    if out:
        out["total"] = sum(v for role, v in out.items() if PART_OF not in role)
    return out


def wait_port(port: int, timeout: float = 60.0, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout:.0f}s")


class Proc:
    """A server or worker process of a run: its own process group, output to a log file;
    stopped with SIGTERM, then SIGKILL after ``grace`` seconds."""

    def __init__(self, args: Sequence[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.args = list(args)
        self.log = log
        self.env = {**os.environ, **(env or {})}
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        out = self.log.open("ab")
        self.popen = subprocess.Popen(
            self.args, stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        out.close()
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)
