"""The reaper helper, with real processes: a worker that dies takes its commands along.

A "worker" here is a child Python process driving ``CommandExecutor`` with a
``Reaper``; the tests SIGKILL it and check that the command's whole process group
(and the helper) are gone. PID 1 in a container may not reap orphans: zombies count
as gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from shardcron.client.types import CommandTask, RunState
from shardcron.v1 import types_pb2, worker_pb2, worker_pb2_grpc
from shardcron.worker import CommandExecutor, HandlerRegistry, RunContext, Worker, reaper_client
from shardcron.worker import reaper as helper_module
from shardcron.worker.reaper_client import Reaper, helper_argv
from tests.support.processes import alive, group_members, kill_group, read_int, stat_fields
from tests.support.waiting import until, wait_until

SH_WITH_BACKGROUND_CHILD = "sleep 300 & echo $! > {pidfile}; sleep 300"


def command(argv: list[str], run_id: str = "r1") -> RunContext:
    return RunContext(run_id=run_id, task=CommandTask(argv=tuple(argv)))


# -- a worker process that is SIGKILLed -----------------------------------------------

WORKER_SCRIPT = textwrap.dedent(
    """
    import asyncio, logging, os, sys, time
    from shardcron.client.types import CommandTask
    from shardcron.worker import CommandExecutor, RunContext
    from shardcron.worker.reaper_client import Reaper

    logging.basicConfig(level=logging.INFO)
    pidfile, mode, info = sys.argv[1], sys.argv[2], sys.argv[3]

    async def main():
        reaper = Reaper()
        if mode == "never-registered":  # as if it died between spawn and registration
            reaper.register = lambda key, pgid, deadline=None: None
        executor = CommandExecutor(reaper=reaper)
        script = "sleep 300 & echo $! > %s; sleep 300" % pidfile
        task = asyncio.create_task(executor.execute(RunContext(
            run_id="r1", task=CommandTask(argv=("sh", "-c", script)))))
        while not os.path.exists(pidfile) and not task.done():
            await asyncio.sleep(0.005)
        while mode != "never-registered" and not reaper.live and not task.done():
            await asyncio.sleep(0.005)
        holder = 0
        if mode == "pipe-held-elsewhere":  # a forked, never exec'ed child keeps the pipe
            holder = os.fork()
            if holder == 0:
                time.sleep(300)
                os._exit(0)
        with open(info + ".tmp", "w") as f:
            f.write("%s %d" % (reaper.pid or 0, holder))
        os.rename(info + ".tmp", info)
        await task

    asyncio.run(main())
    """
)


def start_worker(tmp_path: Path, mode: str) -> tuple[subprocess.Popen, Path, Path]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER_SCRIPT)
    pidfile, info = tmp_path / "bg.pid", tmp_path / "info"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(pidfile), mode, str(info)],
        stderr=subprocess.PIPE,
    )
    return proc, pidfile, info


@pytest.mark.parametrize("mode", ["normal", "never-registered", "pipe-held-elsewhere"])
def test_sigkilled_worker_takes_its_commands_along(tmp_path: Path, mode: str) -> None:
    """normal: the group is registered; never-registered: the worker never sends its
    "+PGID" line (the window right after a spawn), the helper finds the processes by
    their SHARDCRON_REAPER marker; pipe-held-elsewhere: a forked child keeps the pipe
    open (no EOF), the helper's PR_SET_PDEATHSIG acts."""
    proc, pidfile, info = start_worker(tmp_path, mode)
    background = read_int(pidfile)
    wait_until(info.exists, 10, "info")
    helper, holder = map(int, info.read_text().split())
    fields = stat_fields(background)
    assert fields is not None
    sh = int(fields[2])  # the sh leads the group (its own session) the sleeps are in
    try:
        assert helper and alive(helper)
        members = group_members(sh)
        assert sh in members and background in members and len(members) == 3  # + fg sleep
        proc.kill()
        proc.wait()
        t0 = time.monotonic()
        wait_until(lambda: not group_members(sh), 2.0, "the command's group to die")
        assert not alive(sh) and not alive(background)
        wait_until(lambda: not alive(helper), 2.0 - (time.monotonic() - t0), "helper exit")
        if holder:
            assert alive(holder)  # the pipe was still open: no EOF, pdeathsig did it
    finally:
        kill_group(sh)
        if holder:
            with contextlib.suppress(ProcessLookupError):
                os.kill(holder, signal.SIGKILL)
        proc.kill()
        proc.wait()
        proc.stderr.close()  # type: ignore[union-attr]


# -- the executor and its reaper, in this process ------------------------------------


async def test_one_helper_for_many_commands_and_nothing_left_registered(
    tmp_path: Path,
) -> None:
    reaper = Reaper()
    executor = CommandExecutor(reaper=reaper, kill_grace=1.0)
    assert reaper.pid is None  # lazily started
    try:
        runs = [command(["sh", "-c", "sleep 0.2 & echo $$"], f"r{i}") for i in range(5)]
        results = await asyncio.gather(*(executor.execute(r) for r in runs))
        assert {r.state for r in results} == {RunState.SUCCEEDED}
        missing = await executor.execute(command(["/no/such/exe"]))
        assert missing.state == RunState.FAILED
        assert reaper.starts == 1 and reaper.pid is not None
        helper = reaper.pid
        assert alive(helper)
        assert reaper.live == {}
    finally:
        rc = await reaper.close()
    assert rc == 0  # EOF with nothing registered: the helper killed nothing
    assert not os.path.exists(f"/proc/{helper}")  # exited and reaped


async def test_close_with_a_live_group_kills_it(tmp_path: Path) -> None:
    reaper = Reaper()
    executor = CommandExecutor(reaper=reaper)
    pidfile = tmp_path / "bg"
    run = command(["sh", "-c", SH_WITH_BACKGROUND_CHILD.format(pidfile=pidfile)])
    task = asyncio.create_task(executor.execute(run))
    try:
        await until(lambda: pidfile.exists() and pidfile.read_text().strip(), 5, "pid file")
        background = int(pidfile.read_text())
        # Registered once subprocess_exec() returns: that can be after the command started.
        await until(lambda: len(reaper.live) == 1, 5, "registration")
        assert await reaper.close() == 3  # as if the worker had stopped with the run going
        res = await asyncio.wait_for(task, 5)
        assert res.state == RunState.FAILED and res.error == "killed by signal SIGKILL"
        await until(lambda: not alive(background), 2, "background child killed")
    finally:
        run.kill()
        await asyncio.wait_for(task, 5)


async def test_a_killed_helper_is_replaced_and_told_about_live_groups(tmp_path: Path) -> None:
    reaper = Reaper(retry_after=0.2)
    executor = CommandExecutor(reaper=reaper)
    pidfile = tmp_path / "bg"
    run = command(["sh", "-c", SH_WITH_BACKGROUND_CHILD.format(pidfile=pidfile)])
    task = asyncio.create_task(executor.execute(run))
    try:
        await until(lambda: pidfile.exists() and pidfile.read_text().strip(), 5, "pid file")
        background = int(pidfile.read_text())
        await until(lambda: len(reaper.live) == 1, 5, "registration")
        first = reaper.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        await until(lambda: reaper.starts == 2 and reaper.pid is not None, 3, "a new helper")
        assert reaper.pid != first and not task.done()
        assert await reaper.close() == 3  # the new helper knew the live group
        await until(lambda: not alive(background), 2, "background child killed")
    finally:
        run.kill()
        await asyncio.wait_for(task, 5)


async def test_without_a_helper_commands_still_run_and_an_error_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reaper = Reaper(argv=["/nonexistent/python"], retry_after=60)
    executor = CommandExecutor(reaper=reaper)
    for _ in range(3):
        res = await executor.execute(command(["sh", "-c", "exit 0"]))
        assert res.state == RunState.SUCCEEDED
    assert reaper.pid is None and reaper.starts == 0
    errors = [r for r in caplog.records if "cannot start the reaper helper" in r.message]
    assert len(errors) == 1 and errors[0].levelname == "ERROR"  # then waits retry_after
    assert await reaper.close() is None


# -- the helper on its own ---------------------------------------------------------------


def test_helper_protocol_and_signals() -> None:
    sleepers = [subprocess.Popen(["sleep", "300"], start_new_session=True) for _ in range(4)]
    a, b, c, d = (p.pid for p in sleepers)  # each leads its own group
    helper = subprocess.Popen(helper_argv(os.getpid()), stdin=subprocess.PIPE)
    try:
        assert helper.stdin is not None
        lines = [
            f"+{a}",  # the plain form: keyed by the pgid itself
            f"+{b} k1",
            f"+{c}",
            f"-{c}",
            "+1",  # init: refused
            "+0",  # "my own group": refused
            "junk",
            f"+{b} k1",  # idempotent
            "-k1",
            "-k99",  # unknown: ignored
            f"+{d} k2",
        ]
        helper.stdin.write(("\n".join(lines) + "\n").encode())
        helper.stdin.flush()
        time.sleep(0.3)  # started, handlers in place
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            helper.send_signal(sig)
        time.sleep(0.2)
        assert helper.poll() is None  # only EOF ends it
        helper.stdin.write(f"-k2\n.\n+{d} k3".encode())  # torn last line: ignored at EOF
        helper.stdin.close()
        assert helper.wait(5) == 3
        wait_until(lambda: not alive(a), 2, "group a killed")
        assert [alive(p) for p in (b, c, d)] == [True, True, True]
    finally:
        helper.kill()
        helper.wait()
        for p in sleepers:
            p.kill()
            p.wait()


@pytest.mark.parametrize("clean", [False, True])
def test_helper_finds_unregistered_commands_by_their_marker(clean: bool) -> None:
    """Keys never seen (spawned, not registered yet) die with the worker; keys of runs
    that ended, and other workers' commands, do not. A clean close ("." : the runs
    ended) with nothing registered scans nothing."""

    def sleeper(value: str) -> subprocess.Popen:
        env = {**os.environ, "SHARDCRON_REAPER": value}
        return subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)

    in_window = sleeper("m1:k5")
    restarted_before = sleeper("m1:k1")  # settled by "^3" (a restarted helper's base)
    ended = sleeper("m1:k3")
    other_worker = sleeper("m2:k5")
    procs = [in_window, restarted_before, ended, other_worker]
    try:
        wait_until(
            lambda: all(b"SHARDCRON" in Path(f"/proc/{p.pid}/environ").read_bytes() for p in procs),
            5,
            "sleepers exec'ed",
        )
        helper = subprocess.Popen(helper_argv(os.getpid(), "m1"), stdin=subprocess.PIPE)
        script = "^3\n-k3\n" + (".\n" if clean else "")
        helper.communicate(script.encode(), timeout=10)
        if clean:
            assert helper.returncode == 0
            assert all(alive(p.pid) for p in procs)
        else:
            assert helper.returncode == 3
            wait_until(lambda: not alive(in_window.pid), 2, "the unregistered command killed")
            assert [alive(p.pid) for p in procs[1:]] == [True, True, True]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_helper_exits_0_on_eof_with_nothing_registered() -> None:
    helper = subprocess.Popen(helper_argv(os.getpid()), stdin=subprocess.PIPE)
    helper.communicate(b"")
    assert helper.returncode == 0


def test_helper_starts_light() -> None:
    """-I -S by path: no site-packages, no shardcron package import (so no grpc)."""
    assert reaper_client.ENV_NAME == helper_module.ENV_NAME
    argv = helper_argv(os.getpid())
    assert argv[1:3] == ["-I", "-S"] and argv[3].endswith("reaper.py")
    code = "import sys, runpy; runpy.run_path(sys.argv[1]); print(sorted(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, argv[3]], capture_output=True, check=True
    ).stdout.decode()
    assert "shardcron" not in out and "grpc" not in out and "asyncio" not in out


# -- the Worker owns one and stops it -------------------------------------------------------


def _dur(seconds: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


class LeasingPoller(worker_pb2_grpc.WorkerServiceServicer):
    """Welcomes the worker, leases it the given commands (long TTL, no renewals) and
    records the results."""

    def __init__(self, *argvs: list[str]) -> None:
        self.argvs = argvs
        self.results: dict[str, worker_pb2.RunResult] = {}

    async def Connect(self, request_iterator, context):  # noqa: N802 - gRPC method name
        await context.read()  # Hello
        welcome = worker_pb2.Welcome(
            poller_id="p", epoch=1, lease_ttl=_dur(60), heartbeat_interval=_dur(10)
        )
        await context.write(worker_pb2.PollerMessage(welcome=welcome))
        leases = [
            worker_pb2.Lease(
                run_id=f"r{i}",
                job_id="j",
                fencing_token=1,
                task=types_pb2.Task(command=types_pb2.CommandTask(argv=argv)),
            )
            for i, argv in enumerate(self.argvs)
        ]
        await context.write(worker_pb2.PollerMessage(leases=worker_pb2.Leases(leases=leases)))
        while (msg := await context.read()) is not grpc.aio.EOF:
            if msg.WhichOneof("body") == "results":
                self.results.update((r.run_id, r) for r in msg.results.results)


@contextlib.asynccontextmanager
async def serve(poller: LeasingPoller) -> AsyncIterator[int]:
    server = grpc.aio.server()
    worker_pb2_grpc.add_WorkerServiceServicer_to_server(poller, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield port
    finally:
        await server.stop(None)


@contextlib.asynccontextmanager
async def running_worker(port: int, **kw) -> AsyncIterator[Worker]:
    worker = Worker(
        f"127.0.0.1:{port}", registry=HandlerRegistry(builtins=True), kill_grace=1.0, **kw
    )
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        await asyncio.wait_for(worker.stop(), 10)
        await asyncio.wait_for(task, 10)


async def test_worker_stop_makes_the_helper_exit(tmp_path: Path) -> None:
    pidfile = tmp_path / "bg"
    poller = LeasingPoller(["sh", "-c", SH_WITH_BACKGROUND_CHILD.format(pidfile=pidfile)])
    async with serve(poller) as port, running_worker(port) as worker:
        await until(lambda: pidfile.exists() and pidfile.read_text().strip(), 10, "pid file")
        background = int(pidfile.read_text())
        helper = worker._reaper.pid
        assert helper is not None and alive(helper)
    assert not alive(background)
    assert not os.path.exists(f"/proc/{helper}")  # exited (and reaped)
    assert worker._reaper.returncode == 0  # the run had ended and been released


async def test_commands_of_a_grpc_connected_worker_spawn_safely() -> None:
    """A preexec_fn would make spawns fork() the worker, and gRPC's fork handlers then
    crash children (SIGSEGV) while the stream is busy: every command must exit 4."""
    n = 60
    poller = LeasingPoller(*[["sh", "-c", "echo x; exit 4"]] * n)
    async with serve(poller) as port, running_worker(port, slots=n) as worker:
        await until(lambda: len(poller.results) == n, 60, f"{n} results")
        assert worker._reaper.starts == 1
    assert sorted({r.exit_code for r in poller.results.values()}) == [4]
    assert worker._reaper.returncode == 0


# -- cost ------------------------------------------------------------------------------------


async def test_per_command_overhead_is_small() -> None:
    """200 `true` commands with and without the reaper (interleaved, to share the noise)."""
    plain = CommandExecutor()
    reaper = Reaper()
    guarded = CommandExecutor(reaper=reaper)
    await guarded.execute(command(["true"]))  # start the helper outside the timing
    times: dict[str, float] = {"plain": 0.0, "reaper": 0.0}
    n = 200
    try:
        for i in range(n):
            for name, executor in (("plain", plain), ("reaper", guarded))[:: 1 - 2 * (i % 2)]:
                t0 = time.perf_counter()
                res = await executor.execute(command(["true"]))
                times[name] += time.perf_counter() - t0
                assert res.state == RunState.SUCCEEDED
    finally:
        assert await reaper.close() == 0
    per = {k: v / n * 1000 for k, v in times.items()}
    overhead = per["reaper"] - per["plain"]
    print(
        f"\nper command: plain {per['plain']:.2f} ms, with reaper {per['reaper']:.2f} ms, "
        f"overhead {overhead:.2f} ms"
    )
    assert reaper.starts == 1  # one helper for all of them, not one per command
    # Generous (a loaded 2-CPU VM measured plain ~7 ms, with the reaper ~20 ms): the
    # cost is the preexec_fn, which makes the spawn fork() instead of vfork().
    assert per["reaper"] < 3 * per["plain"] + 10


def _children() -> set[int]:
    text = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text()
    return {int(c) for c in text.split()}


@pytest.fixture(scope="module", autouse=True)
def _children_before() -> set[int]:
    # servers other modules started for the whole session are not this module's
    return _children()


def test_no_stray_children(_children_before: set[int]) -> None:
    """Every test above must leave no child processes (helpers included) behind."""
    assert [c for c in _children() - _children_before if alive(c)] == []
