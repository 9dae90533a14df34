"""Executors against real processes and real handlers: outcomes, output, kills."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from shardcron.client.types import CommandTask, HandlerTask, RunReason, RunState
from shardcron.worker import (
    CommandExecutor,
    HandlerContext,
    HandlerExecutor,
    HandlerRegistry,
    RunContext,
    load_handler_modules,
)
from tests.support.processes import alive
from tests.support.waiting import until


async def gone(pid: int, timeout: float = 1.0) -> bool:
    """The process is gone within ``timeout`` (a SIGKILL lands asynchronously)."""
    return await until(lambda: not alive(pid), timeout, f"process {pid} gone", interval=0.005)


async def wait_for_file(path: Path, timeout: float = 5.0) -> str:
    await until(lambda: path.exists() and path.read_text().strip(), timeout, f"{path} written")
    return path.read_text().strip()


class Out:
    def __init__(self) -> None:
        self.chunks: list[tuple[str, bytes]] = []

    def __call__(self, stream: str, data: bytes) -> None:
        self.chunks.append((stream, data))

    def text(self, stream: str) -> str:
        return b"".join(d for s, d in self.chunks if s == stream).decode()


Executors = Callable[..., CommandExecutor]


@pytest.fixture
async def executors() -> AsyncIterator[Executors]:
    """Makes command executors, each closed (its sandbox with it) after the test."""
    made: list[CommandExecutor] = []

    def make(**kw: Any) -> CommandExecutor:
        made.append(CommandExecutor(**kw))
        return made[-1]

    yield make
    for executor in made:
        await executor.close()


def command(argv: list[str], out: Out | None = None, **kw) -> RunContext:
    task = CommandTask(argv=tuple(argv), env=kw.pop("env", {}), cwd=kw.pop("cwd", ""))
    defaults = dict(run_id="r1", job_id="j1", attempt=2, fencing_token=77, on_output=out)
    return RunContext(task=task, **{**defaults, **kw})


# -- commands -------------------------------------------------------------------------


async def test_command_success_env_cwd_and_output(executors: Executors, tmp_path: Path) -> None:
    out = Out()
    script = (
        'echo "$SHARDCRON_RUN_ID $SHARDCRON_JOB_ID $SHARDCRON_ATTEMPT '
        '$SHARDCRON_FENCING_TOKEN $FOO"; pwd; echo oops >&2'
    )
    run = command(["sh", "-c", script], out, env={"FOO": "bar"}, cwd=str(tmp_path))
    res = await executors().execute(run)
    assert res.state == RunState.SUCCEEDED
    assert res.exit_code == 0
    assert res.started_at is not None and res.ended_at is not None
    assert res.started_at <= res.ended_at
    lines = out.text("stdout").splitlines()
    assert lines == ["r1 j1 2 77 bar", str(tmp_path)]
    assert out.text("stderr") == "oops\n"


async def test_command_non_zero_exit(executors: Executors) -> None:
    res = await executors().execute(command(["sh", "-c", "exit 3"]))
    assert res.state == RunState.FAILED
    assert res.reason == RunReason.NON_ZERO_EXIT
    assert res.exit_code == 3
    assert "3" in res.error


async def test_large_output_arrives_in_bounded_chunks(executors: Executors) -> None:
    out = Out()
    res = await executors().execute(command(["head", "-c", "300000", "/dev/zero"], out))
    assert res.state == RunState.SUCCEEDED
    assert sum(len(d) for _, d in out.chunks) == 300000
    assert all(len(d) <= 64 * 1024 for _, d in out.chunks)


async def test_missing_executable_is_spawn_failed(executors: Executors) -> None:
    res = await executors().execute(command(["/no/such/binary-xyz", "a"]))
    assert res.state == RunState.FAILED
    assert res.reason == RunReason.SPAWN_FAILED
    assert "/no/such/binary-xyz" in res.error and "not found" in res.error


async def test_missing_cwd_is_spawn_failed(executors: Executors, tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    res = await executors().execute(command(["true"], cwd=str(missing)))
    assert res.state == RunState.FAILED
    assert res.reason == RunReason.SPAWN_FAILED
    assert str(missing) in res.error and "working directory" in res.error


async def test_timeout_kills_whole_process_group(executors: Executors, tmp_path: Path) -> None:
    pidfile = tmp_path / "gc.pid"
    script = f"sleep 300 & echo $! > {pidfile}; sleep 300"
    run = command(["sh", "-c", script], timeout=0.5)
    t0 = time.monotonic()
    res = await executors(kill_grace=3).execute(run)
    elapsed = time.monotonic() - t0
    assert res.state == RunState.TIMED_OUT
    assert res.reason == RunReason.TIMEOUT
    assert 0.4 < elapsed < 2.5  # SIGTERM ended it; no need for the grace
    grandchild = int(pidfile.read_text())
    assert await gone(grandchild)


async def test_sigterm_ignored_escalates_to_sigkill_after_grace(
    executors: Executors, tmp_path: Path
) -> None:
    pidfile = tmp_path / "gc.pid"
    script = f"trap '' TERM; sleep 300 & echo $! > {pidfile}; wait"
    run = command(["sh", "-c", script], timeout=0.3)
    t0 = time.monotonic()
    res = await executors(kill_grace=0.5).execute(run)
    elapsed = time.monotonic() - t0
    assert res.state == RunState.TIMED_OUT
    assert elapsed >= 0.3 + 0.5 - 0.05  # it waited the grace before SIGKILL
    assert elapsed < 3
    assert await gone(int(pidfile.read_text()))


async def test_background_child_does_not_outlive_successful_run(
    executors: Executors, tmp_path: Path
) -> None:
    pidfile = tmp_path / "gc.pid"
    run = command(["sh", "-c", f"sleep 300 & echo $! > {pidfile}; echo done"])
    res = await asyncio.wait_for(executors().execute(run), 5)
    assert res.state == RunState.SUCCEEDED
    assert await gone(int(pidfile.read_text()))


async def test_cancel_terminates_group_and_reports_cancelled(
    executors: Executors, tmp_path: Path
) -> None:
    pidfile = tmp_path / "gc.pid"
    run = command(["sh", "-c", f"sleep 300 & echo $! > {pidfile}; sleep 300"])
    job = asyncio.create_task(executors(kill_grace=3).execute(run))
    grandchild = int(await wait_for_file(pidfile))
    assert alive(grandchild)
    run.cancel(RunReason.REPLACED)
    res = await asyncio.wait_for(job, 5)
    assert res.state == RunState.CANCELLED
    assert res.reason == RunReason.REPLACED
    assert await gone(grandchild)


async def test_kill_is_immediate_even_when_sigterm_is_ignored(
    executors: Executors, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pid"
    run = command(["sh", "-c", f"trap '' TERM; echo $$ > {pidfile}; sleep 300 & wait"])
    job = asyncio.create_task(executors(kill_grace=30).execute(run))
    pid = int(await wait_for_file(pidfile))
    t0 = time.monotonic()
    run.kill()
    res = await asyncio.wait_for(job, 5)
    assert time.monotonic() - t0 < 2
    assert res.state == RunState.CANCELLED
    assert res.reason == RunReason.WORKER_LOST
    assert await gone(pid)


# -- handlers -------------------------------------------------------------------------


def handler_run(name: str, payload: bytes = b"", out: Out | None = None, **kw) -> RunContext:
    return RunContext(
        run_id="h1", job_id="j1", task=HandlerTask(name=name, payload=payload), on_output=out, **kw
    )


@pytest.fixture
def reg() -> HandlerRegistry:
    return HandlerRegistry(builtins=True)


async def test_sync_handler_runs_in_thread_with_context_and_log(reg: HandlerRegistry) -> None:
    seen: dict[str, object] = {}

    @reg.handler("greet")
    def greet(ctx: HandlerContext) -> str:
        seen["thread"] = threading.current_thread().name
        seen["ids"] = (ctx.run_id, ctx.job_id, ctx.attempt, ctx.fencing_token)
        seen["deadline"] = ctx.deadline
        ctx.log("working\n")
        return "hello " + ctx.payload.decode()

    out = Out()
    run = handler_run("greet", b"bob", out, attempt=3, fencing_token=9, timeout=10)
    res = await HandlerExecutor(reg).execute(run)
    assert res.state == RunState.SUCCEEDED
    assert out.text("stdout") == "working\nhello bob"
    assert str(seen["thread"]).startswith("shardcron-handler")
    assert seen["ids"] == ("h1", "j1", 3, 9)
    assert isinstance(seen["deadline"], float) and seen["deadline"] > time.monotonic()


async def test_async_handler_returns_bytes(reg: HandlerRegistry) -> None:
    @reg.handler
    async def double(ctx: HandlerContext) -> bytes:
        ctx.log(b"x")
        return ctx.payload * 2

    out = Out()
    res = await HandlerExecutor(reg).execute(handler_run("double", b"ab", out))
    assert res.state == RunState.SUCCEEDED
    assert out.text("stdout") == "xabab"
    assert "double" in reg.names()


async def test_a_handler_registered_again_runs_as_the_new_one_is_async_or_not(
    reg: HandlerRegistry,
) -> None:
    executor = HandlerExecutor(reg)

    async def first(ctx: HandlerContext) -> str:
        return threading.current_thread().name

    def second(ctx: HandlerContext) -> str:
        return threading.current_thread().name

    reg.register("swap", first)
    out = Out()
    await executor.execute(handler_run("swap", out=out))
    reg.register("swap", second)
    await executor.execute(handler_run("swap", out=out))
    on_loop, in_pool = out.text("stdout").split("shardcron-handler", 1)
    assert on_loop == threading.current_thread().name and in_pool


async def test_handler_exception_is_handler_error_with_traceback(reg: HandlerRegistry) -> None:
    def explode(ctx: HandlerContext) -> None:
        raise ValueError("bad input")

    reg.register("explode", explode)
    out = Out()
    res = await HandlerExecutor(reg).execute(handler_run("explode", out=out))
    assert res.state == RunState.FAILED
    assert res.reason == RunReason.HANDLER_ERROR
    assert res.error == "ValueError: bad input"
    err = out.text("stderr")
    assert "Traceback" in err and "in explode" in err and "ValueError: bad input" in err


async def test_builtin_handlers(reg: HandlerRegistry) -> None:
    ex = HandlerExecutor(reg)
    out = Out()
    assert (await ex.execute(handler_run("noop"))).state == RunState.SUCCEEDED
    assert (await ex.execute(handler_run("echo", b"ping", out))).state == RunState.SUCCEEDED
    assert out.text("stdout") == "ping"
    res = await ex.execute(handler_run("fail", b"on purpose"))
    assert (res.state, res.reason, res.error) == (
        RunState.FAILED,
        RunReason.HANDLER_ERROR,
        "RuntimeError: on purpose",
    )
    t0 = time.monotonic()
    assert (await ex.execute(handler_run("sleep", b"0.2"))).state == RunState.SUCCEEDED
    assert time.monotonic() - t0 >= 0.19


async def test_unknown_handler_is_no_handler(reg: HandlerRegistry) -> None:
    res = await HandlerExecutor(reg).execute(handler_run("nobody"))
    assert res.state == RunState.FAILED
    assert res.reason == RunReason.NO_HANDLER
    assert "nobody" in res.error


async def test_async_handler_timeout(reg: HandlerRegistry) -> None:
    t0 = time.monotonic()
    res = await HandlerExecutor(reg).execute(handler_run("sleep", b"30", timeout=0.2))
    assert res.state == RunState.TIMED_OUT
    assert res.reason == RunReason.TIMEOUT
    assert time.monotonic() - t0 < 2


async def test_cancel_async_handler(reg: HandlerRegistry) -> None:
    state = {"started": asyncio.Event(), "cancelled": False}

    @reg.handler("wait")
    async def wait(ctx: HandlerContext) -> None:
        state["started"].set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            state["cancelled"] = True
            raise

    run = handler_run("wait")
    job = asyncio.create_task(HandlerExecutor(reg, kill_grace=2).execute(run))
    await asyncio.wait_for(state["started"].wait(), 2)
    run.cancel(RunReason.CANCELLED_BY_USER)
    res = await asyncio.wait_for(job, 2)
    assert res.state == RunState.CANCELLED
    assert res.reason == RunReason.CANCELLED_BY_USER
    assert state["cancelled"] is True


async def test_cancel_sync_handler_sets_event(reg: HandlerRegistry) -> None:
    started = threading.Event()
    saw_cancel = threading.Event()

    @reg.handler("poll")
    def poll(ctx: HandlerContext) -> None:
        started.set()
        if ctx.cancelled.wait(10):
            saw_cancel.set()

    run = handler_run("poll")
    job = asyncio.create_task(HandlerExecutor(reg, kill_grace=2).execute(run))
    await asyncio.to_thread(started.wait, 2)
    run.cancel(RunReason.JOB_DELETED)
    res = await asyncio.wait_for(job, 3)
    assert res.state == RunState.CANCELLED
    assert res.reason == RunReason.JOB_DELETED
    assert saw_cancel.is_set()


def test_load_handler_modules_registers_through_decorator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shardcron.worker import registry

    (tmp_path / "my_jobs_mod.py").write_text(
        textwrap.dedent(
            """
            from shardcron.worker import handler

            @handler("my-job")
            def my_job(ctx):
                return "ok"
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_jobs_mod", raising=False)
    [mod] = load_handler_modules(["my_jobs_mod"])
    try:
        assert registry.get("my-job") is mod.my_job
        assert {"noop", "echo", "sleep", "fail", "my-job"} <= set(registry.names())
    finally:
        registry._handlers.pop("my-job", None)
    with pytest.raises(ImportError, match="no_such_handler_mod"):
        load_handler_modules(["no_such_handler_mod"])


def test_handler_module_in_the_current_directory_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: ``shardcron worker --handlers myhandlers`` run from the folder holding
    ``myhandlers.py`` failed with "No module named 'myhandlers'" (the program's
    ``sys.path`` starts at its script's folder, not the current one)."""
    from shardcron.worker import registry

    (tmp_path / "cwd_handlers_mod.py").write_text(
        "from shardcron.worker import handler\n\n"
        "@handler('cwd-job')\n"
        "def cwd_job(ctx):\n"
        "    return 'ok'\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "cwd_handlers_mod", raising=False)
    try:
        [mod] = load_handler_modules(["cwd_handlers_mod"])
        assert registry.get("cwd-job") is mod.cwd_job
    finally:
        registry._handlers.pop("cwd-job", None)


async def test_log_writes_lines_and_json_decodes_the_payload(reg: HandlerRegistry) -> None:
    """Regression: ``ctx.log("a")`` added no newline, so two calls ran together; and a
    JSON payload needed decoding by hand."""
    seen: dict[str, object] = {}

    @reg.handler("lines")
    def lines(ctx: HandlerContext) -> None:
        seen["payload"] = ctx.json()
        ctx.log("one")
        ctx.log("two\n")
        ctx.log(b"raw")

    out = Out()
    res = await HandlerExecutor(reg).execute(handler_run("lines", b'{"customer": 7}', out))
    assert res.state == RunState.SUCCEEDED
    assert out.text("stdout") == "one\ntwo\nraw"
    assert seen["payload"] == {"customer": 7}

    res = await HandlerExecutor(reg).execute(handler_run("lines", b"not json", Out()))
    assert res.state == RunState.FAILED and res.reason == RunReason.HANDLER_ERROR
    assert "JSONDecodeError" in res.error


def _children() -> set[int]:
    text = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text()
    return {int(c) for c in text.split()}


@pytest.fixture(scope="module", autouse=True)
def _children_before() -> set[int]:
    # servers other modules started for the whole session are not this module's
    return _children()


def test_no_stray_children(_children_before: set[int]) -> None:
    """Every test above must leave no child processes behind."""
    assert [c for c in _children() - _children_before if alive(c)] == []


async def test_a_command_with_the_largest_environment_and_argv_gets_them_whole(
    executors: Executors,
) -> None:
    """The run's configuration goes to its supervisor over a socket: one larger than the
    socket's buffer still arrives whole."""
    value, word = "v" * (120 << 10), "a" * (120 << 10)
    out = Out()
    run = command(["sh", "-c", "echo ${#BIG} ${#0}", word], out, env={"BIG": value})
    res = await executors().execute(run)
    assert res.state == RunState.SUCCEEDED
    assert out.text("stdout") == f"{len(value)} {len(word)}\n"
