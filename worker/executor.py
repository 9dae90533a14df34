"""Executors: how a worker runs one leased run, a command or a Python handler.

``CommandExecutor`` runs argv under a supervisor of its own, in the run's cage and as
its user (``sandbox``, ``containment.supervisor``), and always ends every process of
it (timeout and cancel: SIGTERM, grace, SIGKILL; kill: SIGKILL at once), even those
that left its process group or session; the supervisor kills it at its lease
deadline on its own, and when the worker dies. ``HandlerExecutor`` calls a
registered callable: async ones as tasks, sync ones in a bounded thread pool. Neither
knows about gRPC. The run/outcome types live in ``context`` and are re-exported here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import inspect
import logging
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import partial
from typing import Any

from shardcron.client.types import CommandTask, HandlerTask, RunReason, RunState, RunUsage
from shardcron.worker.handlers import HandlerRegistry

from .artifacts import ArtifactCache, ArtifactFetchFailed
from .context import (
    ExecResult,
    Executor,
    HandlerContext,
    OutputCallback,
    RunContext,
    failed_result,
    stopped_result,
    utcnow,
)
from .result_files import send_results
from .sandbox import RunPlace, Sandbox, SandboxConfig
from .supervisor_client import CHUNK_SIZE, SpawnFailed, Supervised

__all__ = [
    "CommandExecutor",
    "ExecResult",
    "Executor",
    "HandlerContext",
    "HandlerExecutor",
    "OutputCallback",
    "RunContext",
]

log = logging.getLogger(__name__)
Launch = Callable[[], Coroutine[Any, Any, ExecResult]]  # starts a run; awaited, its result

# What a command gets of the worker's own environment, unless the worker inherits it
# all: enough to find programs and speak the locale, nothing the worker holds (its
# credentials, its SHARDCRON_* settings, another tenant's variables).
BASE_ENV_KEYS = ("PATH", "HOME", "LANG")
# What a command never gets of the worker's environment, even when it inherits it all:
# the worker's token, and where a node's keys, auth file and TLS key are.
CREDENTIAL_ENV_KEYS = frozenset(
    {
        "SHARDCRON_TOKEN",
        "SHARDCRON_TOKEN_FILE",
        "SHARDCRON_NODE_TOKEN",
        "SHARDCRON_SECRETS_KEY_FILE",
        "SHARDCRON_AUTH_FILE",
        "SHARDCRON_TLS_KEY",
    }
)


def command_base_env(environ: Mapping[str, str], *, inherit: bool = False) -> dict[str, str]:
    """The environment a command starts from, before its job's env: all of ``environ``
    but ``CREDENTIAL_ENV_KEYS`` when ``inherit``, else only ``BASE_ENV_KEYS`` (PATH
    defaults to ``os.defpath``)."""
    if inherit:
        return {k: v for k, v in environ.items() if k not in CREDENTIAL_ENV_KEYS}
    base = {key: environ[key] for key in BASE_ENV_KEYS if key in environ}
    base.setdefault("PATH", os.defpath)
    return base


class CommandExecutor:
    """Runs a ``CommandTask`` under its supervisor, in ``sandbox`` (module docstring).

    The command's environment is ``command_base_env`` of ``base_env`` (default: this
    process's environment at each run), then what its sandbox adds (``HOME``, ``TMPDIR``,
    ``SHARDCRON_SECRETS_DIR``), then the job's ``env`` and ``secret_env``, then the run's
    ``SHARDCRON_*`` variables.

    Without a ``sandbox`` it opens one of its own at its first command (the containment
    this host gives, the worker's own user); ``close()`` then ends it."""

    def __init__(
        self,
        *,
        kill_grace: float = 5.0,
        base_env: Mapping[str, str] | None = None,
        inherit_env: bool = False,
        sandbox: Sandbox | None = None,
        artifacts: ArtifactCache | None = None,
    ) -> None:
        self.kill_grace = kill_grace
        self.artifacts = artifacts  # None: a command naming an artifact fails
        self.base_env = base_env
        self.inherit_env = inherit_env
        self._own_sandbox = sandbox is None
        self.sandbox = sandbox or Sandbox(SandboxConfig(), f"executor-{os.getpid()}")

    async def close(self) -> None:
        """Ends the sandbox this executor opened itself (none given)."""
        if self._own_sandbox and self.sandbox.opened:
            await self.sandbox.close()

    def _env(self, run: RunContext, task: CommandTask, place: RunPlace) -> dict[str, str]:
        environ = os.environ if self.base_env is None else self.base_env
        env = command_base_env(environ, inherit=self.inherit_env)
        env.update(place.env)
        env.update(task.env)
        env.update(task.secret_env)
        env.update(
            SHARDCRON_RUN_ID=run.run_id,
            SHARDCRON_JOB_ID=run.job_id,
            SHARDCRON_ATTEMPT=str(run.attempt),
            SHARDCRON_FENCING_TOKEN=str(run.fencing_token),
        )
        return env

    async def execute(self, run: RunContext) -> ExecResult:
        task = run.task
        if not isinstance(task, CommandTask):
            return failed_result(RunReason.SPAWN_FAILED, "not a command task")
        if not task.argv:
            return failed_result(RunReason.SPAWN_FAILED, "empty argv")
        if run.stopping:
            return stopped_result(run, False, utcnow())
        started = utcnow()
        if not task.artifact:
            launched = await self._launch(run, task, started, None)
        else:
            fetch, cache = run.fetch_artifact, self.artifacts
            if fetch is None or cache is None:
                return failed_result(
                    RunReason.SPAWN_FAILED, "this worker cannot fetch artifacts", started
                )
            try:  # kept in the cache until its supervisor unpacked it and started the run
                async with cache.held(task.artifact, partial(fetch, task.artifact)) as archive:
                    if run.stopping:  # cancelled or killed while it was fetched
                        return stopped_result(run, False, utcnow())
                    launched = await self._launch(run, task, started, str(archive))
            except ArtifactFetchFailed as e:
                return failed_result(RunReason.SPAWN_FAILED, str(e), started)
        if isinstance(launched, ExecResult):
            return launched
        supervised, place = launched
        return await self._supervise(run, supervised, place, started)

    async def _launch(
        self, run: RunContext, task: CommandTask, started: datetime, archive: str | None
    ) -> tuple[Supervised, RunPlace] | ExecResult:
        """Starts the run's command (``archive``: the path of its checked artifact, which
        its supervisor unpacks first); the run's result when it did not start."""
        sandbox = self.sandbox
        try:
            if not sandbox.opened:
                sandbox.open()
            place = sandbox.place(run.run_id, run.fencing_token, run.owner, task)
            supervised = await sandbox.launch(
                place,
                task,
                self._env(run, task, place),
                run.resources,
                run.lease_deadline,
                archive=archive,
            )
        except (OSError, ValueError) as e:
            return failed_result(RunReason.SPAWN_FAILED, f"cannot contain the run: {e}", started)
        run.on_lease_extended = supervised.extend
        try:
            await supervised.started
        except SpawnFailed as e:
            supervised.close()
            return failed_result(RunReason.SPAWN_FAILED, _spawn_error(task, e), started)
        except BaseException:
            supervised.close()  # its supervisor kills the run at the socket's end
            raise
        return supervised, place

    async def _supervise(
        self, run: RunContext, supervised: Supervised, place: RunPlace, started: datetime
    ) -> ExecResult:
        pumps = [
            asyncio.create_task(_pump(supervised.stdout, "stdout", run)),
            asyncio.create_task(_pump(supervised.stderr, "stderr", run)),
        ]
        ended = supervised.ended
        ended_early = False
        try:
            if not await ended_first(ended, run.stopped(), run.timeout):
                ended_early = True
                await self._terminate(run, supervised)
        except BaseException:
            supervised.kill()
            raise
        finally:
            run.on_lease_extended = None
            if not ended.done():  # its supervisor kills the run at the socket's end
                supervised.close()
            # every process of the run is gone once it ended: its pipes are at EOF
            _, pending = await asyncio.wait(pumps, timeout=1.0)
            for p in pending:
                p.cancel()
        report = ended.result()
        if report is None:
            self.sandbox.abandoned(place)
            return failed_result(
                RunReason.WORKER_LOST,
                "its supervisor ended without a report; the run's processes were killed",
                started,
            )
        results = report.get("results")
        note = await send_results(run, results) if results else ""
        res = _outcome(run, report, ended_early, started)
        return dataclasses.replace(res, results_note=note) if note else res

    async def _terminate(self, run: RunContext, supervised: Supervised) -> None:
        """SIGTERM the run, wait the grace (cut short by a kill), then SIGKILL it."""
        ended = supervised.ended
        if not run.killed:
            supervised.stop()
            await asyncio.wait(
                {ended, run.killed_future()},
                timeout=self.kill_grace,
                return_when=asyncio.FIRST_COMPLETED,
            )
        supervised.kill()
        await asyncio.shield(ended)


def _outcome(
    run: RunContext, report: dict[str, Any], ended_early: bool, started: datetime
) -> ExecResult:
    """The run's result from its supervisor's report of its end."""
    rc = os.waitstatus_to_exitcode(report["status"])
    usage = RunUsage(
        peak_memory_bytes=int(report["peak_memory_bytes"]),
        cpu_seconds=float(report["cpu_seconds"]),
        limits_enforced=bool(report["enforced"]),
    )
    if ended_early:
        return dataclasses.replace(stopped_result(run, True, started, rc), usage=usage)
    if report["killed"]:  # by its supervisor alone: the worker lost the lease meanwhile
        state, reason, error = (
            RunState.CANCELLED,
            RunReason.WORKER_LOST,
            f"killed: {report['killed']}",
        )
    elif rc == 0:
        state, reason, error = RunState.SUCCEEDED, RunReason.NONE, ""
    elif report["oom_kills"]:
        memory = run.resources.memory_mb if run.resources is not None else 0
        state, reason = RunState.FAILED, RunReason.OOM_KILLED
        error = (
            f"killed at its memory limit of {memory} MiB "
            f"(peak {usage.peak_memory_bytes / (1 << 20):.1f} MiB; {_exit_text(rc)})"
        )
    else:
        state, reason, error = RunState.FAILED, RunReason.NON_ZERO_EXIT, _exit_text(rc)
    return ExecResult(
        state=state,
        reason=reason,
        exit_code=rc,
        error=error,
        started_at=started,
        ended_at=utcnow(),
        usage=usage,
    )


def _exit_text(rc: int) -> str:
    if rc >= 0:
        return f"exit code {rc}"
    try:
        return f"killed by signal {signal.Signals(-rc).name}"
    except ValueError:
        return f"killed by signal {-rc}"


def _spawn_error(task: CommandTask, failure: SpawnFailed) -> str:
    """Why the command did not start, in the words the worker has always used."""
    program, cwd = task.argv[0], task.cwd
    if failure.stage == "exec":
        if failure.errno == errno.ENOENT:
            return f"executable {program!r} not found"
        if failure.errno == errno.EACCES:
            return f"cannot execute {program!r}: permission denied"
        return f"cannot start {program!r}: {failure.error}"
    if failure.stage == "cwd":
        if failure.errno == errno.ENOENT:
            return f"working directory {cwd!r} does not exist"
        return f"working directory {cwd!r}: {failure.error}"
    if failure.stage == "user":
        return f"cannot run as the run's user: {failure.error}"
    if failure.stage == "artifact":
        return f"cannot unpack its artifact {task.artifact}: {failure.error}"
    return f"cannot contain the run ({failure.stage}): {failure.error}"


async def _pump(stream: asyncio.StreamReader, name: str, run: RunContext) -> None:
    while True:
        data = await stream.read(CHUNK_SIZE)
        if not data:
            return
        run.emit(name, data)
        if run.output_room is not None:
            await run.output_room()


async def ended_first(job: asyncio.Future, stopped: asyncio.Future, timeout: float | None) -> bool:
    """Waits until ``job`` is done, ``stopped`` is done or ``timeout`` seconds pass; True
    when ``job`` is done. What ``asyncio.wait(FIRST_COMPLETED)`` does for these two,
    without its set, its copies and its per-call bookkeeping (a worker pays it per run)."""
    if job.done():
        return True
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    job.add_done_callback(wake)
    stopped.add_done_callback(wake)
    timer = None if timeout is None else loop.call_later(timeout, wake)
    try:
        await waiter
    finally:
        job.remove_done_callback(wake)
        stopped.remove_done_callback(wake)
        if timer is not None:
            timer.cancel()
    return job.done()


def _is_async(fn: Callable) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - callable objects with async __call__
    )


def _as_bytes(value: object) -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return str(value).encode()


class HandlerExecutor:
    """Runs a ``HandlerTask`` with the handler registered under its name."""

    def __init__(
        self,
        registry: HandlerRegistry | None = None,
        *,
        max_threads: int = 8,
        kill_grace: float = 5.0,
    ) -> None:
        if registry is None:
            from shardcron.worker.handlers import registry as default_registry

            registry = default_registry
        self.registry = registry
        self.kill_grace = kill_grace
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, max_threads), thread_name_prefix="shardcron-handler"
        )
        # Whether each handler is async, by name, beside the handler it was found for (a
        # name registered again is looked at again): inspect's test, once a run, is slow.
        self._async: dict[str, tuple[Callable, bool]] = {}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _context(self, run: RunContext, task: HandlerTask) -> HandlerContext:
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()

        def sink(stream: str, data: bytes) -> None:
            if threading.get_ident() == loop_thread:
                run.emit(stream, data)
            else:
                loop.call_soon_threadsafe(run.emit, stream, data)

        return HandlerContext(
            run_id=run.run_id,
            job_id=run.job_id,
            attempt=run.attempt,
            fencing_token=run.fencing_token,
            payload=task.payload,
            deadline=None if run.timeout is None else time.monotonic() + run.timeout,
            sink=sink,
        )

    async def execute(self, run: RunContext) -> ExecResult:
        return await self.begin(run)

    def begin(self, run: RunContext) -> Coroutine[Any, Any, ExecResult]:
        """Starts the run's handler now; the coroutine returned waits for its result."""
        return self.prepare(run)()

    def prepare(self, run: RunContext) -> Launch:
        """What starts the run's handler, made ready ahead (its handler looked up, its
        context built unless a timeout counts from the start), so that starting it costs
        little: a worker releasing the many runs of one due instant starts each in one
        pass (``due_gate``). Called, it stamps the start, starts the handler and gives
        the coroutine that waits for its result."""
        task = run.task
        if not isinstance(task, HandlerTask):
            return partial(at_once, failed_result(RunReason.NO_HANDLER, "not a handler task"))
        fn = self.registry.get(task.name)
        if fn is None:
            why = f"no handler named {task.name!r} on this worker"
            return partial(at_once, failed_result(RunReason.NO_HANDLER, why))
        known = self._async.get(task.name)
        if known is None or known[0] is not fn:  # looked up once per handler, not per run
            known = self._async[task.name] = (fn, _is_async(fn))
        loop = asyncio.get_running_loop() if known[1] else None
        ready = self._context(run, task) if run.timeout is None else None

        def launch() -> Coroutine[Any, Any, ExecResult]:
            started = utcnow()
            if run.stopping:
                return at_once(stopped_result(run, False, started))
            ctx = ready or self._context(run, task)
            if loop is not None:
                job: asyncio.Future = loop.create_task(fn(ctx))
                cancel_job = job.cancel
            else:
                thread_job = self._pool.submit(fn, ctx)
                job = asyncio.wrap_future(thread_job)
                # This only stops a job still queued for a thread; a running one must
                # see ctx.cancelled (cancelling the asyncio wrapper would just stop waiting).
                cancel_job = thread_job.cancel
            return self._outcome(run, ctx, job, cancel_job, started)

        return launch

    async def _outcome(
        self,
        run: RunContext,
        ctx: HandlerContext,
        job: asyncio.Future,
        cancel_job: Callable[[], bool],
        started: datetime,
    ) -> ExecResult:
        """Waits for a handler started by ``prepare``'s launch: its result, or its stop."""
        try:
            if not job.done():
                # Let the handler take its first step (queued ahead of us): most end
                # there, and a done job is read at once, without ended_first's waiter
                # and the two wake-ups it costs (about 5 us a run).
                await asyncio.sleep(0)
            ended = job.done() or await ended_first(job, run.stopped(), run.timeout)
        except BaseException:
            ctx.cancelled.set()
            cancel_job()
            raise
        if not ended:
            await self._stop_job(run, ctx, job, cancel_job)
            return stopped_result(run, True, started)
        try:
            value = job.result()
        except Exception as e:
            tb = "".join(traceback.format_exception(e))
            run.emit("stderr", tb.encode())
            return failed_result(RunReason.HANDLER_ERROR, f"{type(e).__name__}: {e}", started)
        except asyncio.CancelledError:
            # The handler cancelled itself (we did not ask): count it as an error.
            return failed_result(
                RunReason.HANDLER_ERROR, "CancelledError: handler was cancelled", started
            )
        run.emit("stdout", _as_bytes(value))
        return ExecResult(state=RunState.SUCCEEDED, started_at=started, ended_at=utcnow())

    async def _stop_job(
        self,
        run: RunContext,
        ctx: HandlerContext,
        job: asyncio.Future,
        cancel_job: Callable[[], bool],
    ) -> None:
        """Cancel the handler; wait up to the grace (not at all on kill) for it to end."""
        ctx.cancelled.set()
        cancel_job()
        if run.killed:
            await asyncio.sleep(0)  # let a cancelled task unwind one step
        else:
            await asyncio.wait(
                {job, run.killed_future()},
                timeout=self.kill_grace,
                return_when=asyncio.FIRST_COMPLETED,
            )
        # Retrieve the outcome, now or later, so asyncio logs no "never retrieved".
        job.add_done_callback(_consume)
        if not job.done():
            log.warning(
                "handler of run %s still running after it was stopped (a sync handler must "
                "poll ctx.cancelled)",
                run.run_id,
            )


def launcher(
    ctx: RunContext, handlers: HandlerExecutor | None, commands: CommandExecutor | None
) -> Launch:
    """What starts the run: a handler's made ready now (``HandlerExecutor.prepare``), a
    command's spawned once awaited; ``commands`` None: this worker runs none."""
    if not isinstance(ctx.task, CommandTask):
        assert handlers is not None
        return handlers.prepare(ctx)
    if commands is None:
        why = "this worker does not run commands"
        return partial(at_once, failed_result(RunReason.SPAWN_FAILED, why))
    return partial(commands.execute, ctx)


async def at_once(result: ExecResult) -> ExecResult:
    """``result``, awaited: what ``begin`` gives for a run that ends before it starts."""
    return result


def _consume(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()
