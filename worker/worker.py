"""The worker: takes leases from pollers, runs them, renews them, reports results.

``Worker`` owns the runs, their lease deadlines and the executors; each poller
address gets a ``PollerLink`` (one stream). A run is killed at once, and its result
never reported, when its lease is revoked (Renewal ok=false) or its deadline passes
without renewal: no run outlives its lease ("never twice at once").

The deadline is the lease's ``expires_at`` (set by the poller, moved by each granted
renewal) on this machine's clock less ``LEASE_SAFETY_MARGIN`` (clock skew: proto/README.md);
a lease already past it is refused, never started. Each command's supervisor, in the
command's own cage, kills it at that deadline on its own clock (``sandbox``): a frozen
worker (SIGSTOP) cannot keep a command alive past its lease. A lease given ahead of its
due instant waits (``due_gate``).

A shard move costs no re-execution: a lease whose poller answers ``not_owner`` (the
run's shard moved) or whose stream is down is named to every connected poller until
one renews it, and that poller holds the run from then on; such a run's result is
offered to every poller in the same way (``adrift``). What a run sends besides its
result (output, result files, an artifact fetch) goes to the poller that holds its
lease when it is sent (``run_routes``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Coroutine, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import shardcron
from shardcron.client.dataclass_copies import copy_with
from shardcron.client.sdk.connection import call_metadata
from shardcron.client.stream import (
    CancelOrder,
    Heartbeat,
    Hello,
    LeaseGrant,
    LeaseRef,
    OutputRoom,
    Renewals,
    ResultAck,
    check_hello,
)
from shardcron.client.types import HandlerTask, RunReason

from .adrift import AdriftResults
from .artifacts import ArtifactCache
from .due_gate import DueGate, run_when_due, start_if_due
from .executor import (
    CommandExecutor,
    ExecResult,
    HandlerExecutor,
    RunContext,
    at_once,
    launcher,
)
from .handler_outcomes import Resumed, first_step, worker_error
from .handlers import HandlerRegistry
from .handlers import registry as default_registry
from .leased_runs import HeldRun, lapsed, lease_deadline
from .link import PollerLink
from .outbox import MAX_HEARTBEAT_LEASES, RESULT_ROOM_WAIT
from .output_spool import OutputSpoolConfig, OutputSpools, SpoolEnd
from .run_routes import RunRoutes
from .sandbox import Sandbox, SandboxConfig
from .shares import shared_limits
from .targets import Target, next_reading, read_targets
from .usage_counts import UsageCounts

if TYPE_CHECKING:
    import grpc

log = logging.getLogger(__name__)

WATCHDOG_PERIOD = 0.1
MAX_PENDING_HEARTBEATS = 256


class Worker:
    """Connects to poller(s) and runs what they lease, until ``stop()``.

    ``target`` is "host:port" (several comma-separated), a list of them, or a callable
    (sync or async) returning the current list, re-read every 5 s and at once after
    ``targets_changed()``. Each address gets its own stream; runs are reported to the
    poller that leased them. The stream of an address that left the list is closed at
    once, or, while it is up and its runs or results are not done, once it ends: it is
    never opened again (``_follow_targets``). ``credentials`` (``ClientTls.credentials()``
    of ``shardcron.client.tls``) make every stream TLS; ``token`` authenticates it to a
    node with an auth file (its principal's owners are the runs it is leased);
    ``metadata`` goes with each. Labels, a worker id or a registry past what a node
    takes in a Hello (``client.stream.check_hello``) raise ``InvalidArgument`` here.
    ``sandbox`` says how commands are contained and as whom they run (``SandboxConfig``:
    by default in a cgroup per run where the host gives one, as this process's user);
    ``run()`` sets it up and raises ValueError when the host cannot give what it asks.

    To its links it is a ``StreamOwner``: they call ``hello_for``, ``heartbeat_for``,
    the ``on_*`` handlers, ``rebalance`` and ``slots_to_spare``, not for other callers.
    """

    def __init__(
        self,
        target: Target,
        *,
        worker_id: str | None = None,
        slots: int = 8,
        labels: dict[str, str] | None = None,
        registry: HandlerRegistry | None = None,
        runs_commands: bool = True,
        cpu_millis: int = 0,
        memory_mb: int = 0,
        kill_grace: float = 5.0,
        metadata: Sequence[tuple[str, str]] | dict[str, str] | None = None,
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        inherit_env: bool = False,  # commands get this process's environment, but credentials
        sandbox: SandboxConfig | None = None,
        artifacts: ArtifactCache | None = None,
        output_spool: OutputSpoolConfig | None = None,
    ) -> None:
        """``artifacts``: the cache of jobs' code archives (shared by the workers of one
        process; default: one of its own where ``sandbox`` says)."""
        if slots < 1:
            raise ValueError("slots must be at least 1")
        self.target = target
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        # tells this process from another one given the same worker id: the poller lets
        # a new stream replace a connected worker's only when it comes from the same one
        self.instance_id = uuid.uuid4().hex
        self.slots = slots
        self.labels = dict(labels or {})
        self.registry = registry if registry is not None else default_registry
        self.runs_commands = runs_commands
        self.cpu_millis = cpu_millis
        self.memory_mb = memory_mb
        # what a node refuses in a Hello is refused here, before any stream opens
        self._runs: dict[str, HeldRun] = {}
        self.stats: Counter[str] = Counter()
        # where each run's output, result files and artifact requests go, and its output
        # kept on disk while its node cannot take it
        self._routes = RunRoutes(self._runs, output_spool or OutputSpoolConfig(), self.stats)
        self._spools = self._routes.spools
        check_hello(self._hello(), path="")
        self.kill_grace = kill_grace
        pairs = metadata.items() if isinstance(metadata, dict) else metadata or ()
        self.metadata = tuple(pairs) + call_metadata(None, token)
        self.credentials = credentials
        self.usage = UsageCounts()  # what its command runs used
        self._slots_used = 0
        self._links: dict[str, PollerLink] = {}
        self._adrift = AdriftResults()  # results whose poller no longer serves their shard
        self._credit_limit: int | None = None  # set to 0 while draining
        self._accepting = True
        self._started = False
        self._stop_event = asyncio.Event()
        self._targets_changed = asyncio.Event()
        self._done = asyncio.Event()
        # Where and as whom commands run: a cage and a supervisor per run, which kills it
        # at its lease deadline and when this process dies.
        sandbox = sandbox or SandboxConfig()
        self.sandbox = Sandbox(sandbox, self.worker_id, self.instance_id)
        self.artifacts = artifacts or ArtifactCache(
            sandbox.artifact_cache_dir(), sandbox.artifact_cache_bytes
        )
        self._commands = CommandExecutor(
            kill_grace=kill_grace,
            sandbox=self.sandbox,
            inherit_env=inherit_env,
            artifacts=self.artifacts,
        )
        self._handlers: HandlerExecutor | None = None
        self._due_gate = DueGate()  # leases given ahead, held until their due instant

    # -- observability ------------------------------------------------------------------
    @property
    def slots_used(self) -> int:
        return self._slots_used

    @property
    def output_spool(self) -> OutputSpools:
        """Its runs' output kept on disk while their node cannot take it (read-only)."""
        return self._spools

    @property
    def running(self) -> list[str]:
        return list(self._runs)

    @property
    def connected(self) -> bool:
        return any(link.connected for link in self._links.values())

    @property
    def links(self) -> list[PollerLink]:
        return list(self._links.values())

    # -- lifecycle --------------------------------------------------------------------
    async def run(self) -> None:
        """Connect and serve leases until ``stop()``."""
        if self._started:
            raise RuntimeError("Worker.run() is already running or has run")
        if self.runs_commands:
            self.sandbox.open()  # a host that cannot contain commands as asked: ValueError
        self._started = True
        self._handlers = HandlerExecutor(
            self.registry, max_threads=self.slots, kill_grace=self.kill_grace
        )
        watchdog = asyncio.create_task(self._watchdog(), name="shardcron-lease-watchdog")
        try:
            await self._supervise()
        finally:
            self._accepting = False
            for r in self._runs.values():
                r.abandoned = True
                r.ctx.kill()
            tasks = [r.task for r in self._runs.values() if r.task is not None]
            if tasks:
                await asyncio.wait(tasks, timeout=self.kill_grace + 1)
            self._spools.close()
            try:  # the runs ended: their supervisors are done or finishing
                await self.sandbox.close()
            except Exception:
                log.exception("closing the sandbox failed")
            for link in list(self._links.values()):
                await link.close()
            self._links.clear()
            watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watchdog
            self._handlers.close()
            self._done.set()

    async def stop(self, drain: bool = False, timeout: float | None = None) -> None:
        """Stop. ``drain``: take no new leases (Credits 0), let running runs finish and
        their results be acknowledged (up to ``timeout``). Without drain (or after the
        timeout) running runs are terminated (SIGTERM, grace, SIGKILL) and not reported:
        the pollers re-lease them when their leases expire."""
        if not self._started:
            self._stop_event.set()  # run() will return at once
            return
        if drain and not self._stop_event.is_set():
            self._credit_limit = 0
            self.rebalance()
            deadline = None if timeout is None else time.monotonic() + timeout
            while self._runs or self._adrift or any(link.unacked for link in self._links.values()):
                if deadline is not None and time.monotonic() >= deadline:
                    log.warning("drain timed out with %d runs still going", len(self._runs))
                    break
                await asyncio.sleep(0.02)
        self._accepting = False
        for r in list(self._runs.values()):
            r.abandoned = True
            r.ctx.cancel(RunReason.WORKER_LOST)
        tasks = [r.task for r in self._runs.values() if r.task is not None]
        if tasks:
            await asyncio.wait(tasks)
        self._stop_event.set()
        await self._done.wait()

    def targets_changed(self) -> None:
        """A callable target's list changed: follow it now rather than at the next
        re-read. Called on the worker's event loop."""
        self._targets_changed.set()

    async def _supervise(self) -> None:
        """Keep one link per target address; re-read a callable target periodically."""
        while not self._stop_event.is_set():
            try:
                wanted = await read_targets(self.target)
            except Exception:
                log.exception("resolving poller addresses failed; keeping the current ones")
                wanted = list(self._links)
            await self._follow_targets(wanted)
            if not callable(self.target):
                await self._stop_event.wait()
                return
            await next_reading(self._targets_changed, self._stop_event)

    async def _follow_targets(self, wanted: list[str]) -> None:
        """One link per wanted address. A poller that left the list (membership) is
        dead or going: its link is closed now, unless its stream is still up with runs
        or results of its own, which may still be renewed and acknowledged; such a link
        is retired, so it is not reopened when its stream ends (redialling a poller
        that left would go on for ever), and closed at the next pass after that. Its
        runs go on until their lease deadline, as when any stream is lost."""
        for address, link in list(self._links.items()):
            if address in wanted and not link.ended:
                link.retired = False
            elif address in wanted or not (
                link.connected and (link.unacked or self._runs_of(link))
            ):
                del self._links[address]
                self._set_adrift(link)
                await link.close()
            elif not link.retired:
                log.info("poller %s left: its stream ends with its runs", address)
                link.retired = True
        for address in wanted:
            if address not in self._links:
                link = PollerLink(self, address)
                self._links[address] = link
                link.start()

    # -- sharing the slots among streams --------------------------------------------
    def _limits(self) -> dict[PollerLink, int]:
        """The credit limit of every open stream. One stream: every slot not taken by
        another stream's runs (or by runs still being killed). Several: ``shared_limits``.
        Their sum never exceeds the free slots, so pollers do not lease past this worker's
        capacity (the rare lease that does, sent before a lowered limit arrived, is
        refused)."""
        links = [link for link in self._links.values() if link.sent_limit is not None]
        if not links:
            return {}
        if self._credit_limit == 0:
            return dict.fromkeys(links, 0)
        free = max(0, self.slots - self._slots_used)
        if len(links) == 1:
            return {links[0]: min(self.slots, links[0].held_slots + free)}
        return shared_limits(links, free=free, slots=self.slots, now=time.monotonic())

    def slots_to_spare(self) -> bool:
        return self.slots - self._slots_used > sum(link.demand for link in self._links.values())

    def rebalance(self) -> None:
        """Sends every stream whose credit limit changed its new one."""
        for link, limit in self._limits().items():
            if limit != link.sent_limit:
                link.grant(limit)

    # -- building messages (called by links) -------------------------------------------
    def _runs_of(self, link: PollerLink) -> list[HeldRun]:
        return [r for r in self._runs.values() if r.link is link and not r.lost]

    def _set_adrift(self, link: PollerLink) -> None:
        """The results ``link`` did not acknowledge are offered to every poller."""
        for outcome in link.unacked.values():
            self._adrift.add(outcome)
        link.unacked.clear()

    def _offer_adrift(self, link: PollerLink) -> None:
        """Sends ``link`` the results adrift it was not asked about (those of streams
        that are down are adrift too: their poller may be gone)."""
        for other in self._links.values():
            if other.unacked and not other.connected:
                self._set_adrift(other)
        for outcome in self._adrift.offer(link, link.streams):
            link.outbox.result(outcome)

    def _seeking_refs(self, link: PollerLink) -> list[LeaseRef]:
        """Leases no poller renews now (their shard moved, or their stream is down),
        named to every poller but their own."""
        return [
            r.ref for r in self._runs.values() if not r.lost and r.seeking and r.link is not link
        ]

    def hello_for(self, link: PollerLink) -> Hello:
        now = time.monotonic()
        held = []
        for r in self._runs_of(link):
            # a new stream: its node pauses again the output it cannot take
            self._spools.resume(r.ctx.run_id, r.token)
            # Heartbeats of the old stream will never be answered; Hello.held will.
            r.pending_renewals.clear()
            r.pending_renewals.append(now)
            held.append(r.ref)
        held += self._seeking_refs(link)
        # The new stream's limit goes in Hello; the others may change with it.
        link.sent_limit = 0
        link.sent_limit = self._limits()[link]
        link.granted_at = time.monotonic()
        self.rebalance()
        return self._hello(
            credit_limit=link.sent_limit,
            pending_results=(*link.unacked.values(), *self._adrift.offer(link, link.streams)),
            held=tuple(held[:MAX_HEARTBEAT_LEASES]),  # the heartbeats name the rest
        )

    def _hello(self, **stream: Any) -> Hello:
        """This worker's Hello, with what one stream adds (``stream``)."""
        return Hello(
            worker_id=self.worker_id,
            slots=self.slots,
            cpu_millis=self.cpu_millis,
            memory_mb=self.memory_mb,
            labels=dict(self.labels),
            handlers=frozenset(self.registry.names()),
            runs_commands=self.runs_commands,
            version=shardcron.__version__,
            instance_id=self.instance_id,
            waits_for_due=True,  # due_gate.run_when_due
            output_spool=self._spools.enabled,
            **stream,
        )

    def heartbeat_for(self, link: PollerLink) -> Heartbeat:
        now = time.monotonic()
        refs = []
        for r in self._runs_of(link):
            if len(r.pending_renewals) < MAX_PENDING_HEARTBEATS:
                r.pending_renewals.append(now)  # keep the oldest: the safe side
            refs.append(r.ref)
        self._offer_adrift(link)
        return Heartbeat(leases=(*refs, *self._seeking_refs(link)))

    # -- poller messages ----------------------------------------------------------------
    def on_leases(self, link: PollerLink, grants: Sequence[LeaseGrant]) -> None:
        now, loop = time.monotonic(), asyncio.get_running_loop()
        for lease in grants:
            self.stats["leased"] += 1
            ref = LeaseRef(run_id=lease.run_id, fencing_token=lease.fencing_token)
            if not self._accepting:
                self.stats["refused"] += 1
                log.warning("lease %s arrived while stopping: refused", lease.run_id)
                link.outbox.refused(ref)
                continue
            prev = self._runs.get(lease.run_id)
            if prev is not None and not prev.lost and prev.token == lease.fencing_token:
                log.warning("duplicate lease %s/%d ignored", lease.run_id, lease.fencing_token)
                continue
            if prev is not None:
                self._lose(prev, "re-leased with a new token")
            if lease.expires_at is None:  # an older poller: its TTL counts from now
                deadline = now + (lease.lease_ttl.total_seconds() or link.lease_ttl)
            else:
                deadline = lease_deadline(lease.expires_at)
            if deadline <= now:
                # it reached us late (this process was frozen, or the clocks disagree):
                # the poller may take it back any moment, so none of it may run (checked
                # after duplicates: refusing a lease that runs would make it run twice)
                self.stats["refused_expired"] += 1
                log.warning(
                    "lease %s/%d arrived past its deadline (%s): refused",
                    lease.run_id,
                    lease.fencing_token,
                    lease.expires_at,
                )
                link.outbox.refused(ref)
                continue
            slots = lease.resources.slots
            if self._slots_used + slots > self.slots:
                # another poller was given the slot since this one's credits were sent
                self.stats["refused"] += 1
                log.info(
                    "lease %s refused: %d of %d slots in use",
                    lease.run_id,
                    self._slots_used,
                    self.slots,
                )
                link.outbox.refused(ref)
                continue
            ctx = RunContext(
                run_id=lease.run_id,
                task=lease.task,
                job_id=lease.job_id,
                attempt=lease.attempt,
                fencing_token=lease.fencing_token,
                timeout=lease.timeout.total_seconds() if lease.timeout else None,
                on_output=partial(self._routes.output, link, lease.run_id, lease.fencing_token),
                output_room=partial(self._routes.wait_for_room, lease.run_id),
                result_room=partial(self._routes.wait_for_room, lease.run_id, RESULT_ROOM_WAIT),
                on_result_piece=partial(self._routes.result_piece, link, lease.run_id),
                lease_deadline=deadline,
                owner=lease.owner,
                resources=lease.resources,
                fetch_artifact=partial(
                    self._routes.fetch_artifact, lease.run_id, lease.fencing_token
                ),
            )
            run = HeldRun(
                ctx=ctx, link=link, token=lease.fencing_token, slots=slots, deadline=deadline
            )
            self._runs[lease.run_id] = run
            self._slots_used += slots
            link.held_slots += slots
            if prev is None and isinstance(lease.task, HandlerTask):
                try:
                    outcome = start_if_due(run, lease.due_at, launcher(ctx, self._handlers, None))
                except Exception as e:  # as in _settle: this run fails, the others go on
                    outcome = at_once(worker_error(lease.run_id, e))
                if outcome is not None:  # its handler's first step is queued: read after it
                    loop.call_soon(self._after_first_step, run, outcome)
                    continue
            run.task = loop.create_task(self._execute(run, prev, lease))
        self.rebalance()

    def on_output_room(self, link: PollerLink, room: OutputRoom) -> None:
        """The node pauses or resumes runs' output (``output_spool``)."""
        self._routes.output_room(link, room)

    def on_renewals(self, link: PollerLink, renewals: Renewals, now: float) -> None:
        ttl = renewals.lease_ttl.total_seconds() or link.lease_ttl
        for ren in renewals.renewals:
            run = self._runs.get(ren.run_id)
            if run is None or run.lost or run.token != ren.fencing_token:
                continue
            if run.link is not link:
                # a lease named here while it sought a poller: the one that renews it
                # serves the run's shard now. A refusal from a poller other than the
                # lease's own is not a revocation (an older poller refuses what it
                # does not serve): the run's deadline stands, as if unanswered.
                if ren.ok and ren.expires_at is not None and run.seeking:
                    self._move(run, link)
                    self._extend(run, lease_deadline(ren.expires_at))
                continue
            sent = run.pending_renewals.popleft() if run.pending_renewals else None
            if ren.not_owner:
                if not run.adrift:
                    log.info(
                        "run %s: poller %s no longer serves its shard", ren.run_id, link.address
                    )
                run.adrift = True
            elif not ren.ok:
                self.stats["revoked"] += 1
                self._lose(run, "lease revoked by the poller")
            elif ren.expires_at is not None:
                run.adrift = False
                self._extend(run, lease_deadline(ren.expires_at))
            elif sent is not None:  # an older poller: the TTL counts from the heartbeat
                self._extend(run, sent + ttl)

    def _move(self, run: HeldRun, link: PollerLink) -> None:
        """The run's shard moved to ``link``'s poller, which renewed its lease."""
        log.info("run %s (token %d) now held by poller %s", run.ctx.run_id, run.token, link.address)
        self.stats["moved"] += 1
        run.link.held_slots -= run.slots
        link.held_slots += run.slots
        run.link = link
        run.adrift = False
        run.pending_renewals.clear()
        self.rebalance()

    def _extend(self, run: HeldRun, deadline: float) -> None:
        """A renewal moves the run's deadline (never back), here and in its supervisor."""
        self.stats["renewed"] += 1
        if deadline <= run.deadline:
            return
        run.deadline = deadline
        run.ctx.extend_lease(deadline)

    def on_cancels(self, link: PollerLink, orders: Sequence[CancelOrder]) -> None:
        for c in orders:
            run = self._runs.get(c.run_id)
            if run is None or run.link is not link or run.lost:
                continue
            if c.fencing_token and c.fencing_token != run.token:
                continue
            self.stats["cancel_requests"] += 1
            run.ctx.cancel(c.reason)

    def on_acks(self, link: PollerLink, acks: Sequence[ResultAck]) -> None:
        for a in acks:
            key = (a.run_id, a.fencing_token)
            if a.not_owner:
                # the run's shard moved: the result goes to whichever poller serves it
                home = link.unacked.pop(key, None)
                if home is not None:
                    log.info("result of run %s: its shard moved, offered elsewhere", a.run_id)
                    self._adrift.add(home)
                self._adrift.not_here(link, link.streams, key)
                continue
            if link.unacked.pop(key, None) is None and not self._adrift.settle(key):
                continue
            self.stats["results_accepted" if a.accepted else "results_rejected"] += 1
            if not a.accepted:
                log.info("result of run %s rejected: %s", a.run_id, a.reason or "stale token")

    # -- runs ---------------------------------------------------------------------------
    def _lose(self, run: HeldRun, why: str) -> None:
        """The lease is gone: kill the run now; its result will not be reported."""
        if run.lost:
            return
        run.lost = True
        run.link.held_slots -= run.slots
        self.rebalance()
        self.stats["lost"] += 1
        log.warning("run %s (token %d) killed: %s", run.ctx.run_id, run.token, why)
        run.ctx.kill()

    async def _watchdog(self) -> None:
        """Kill every run whose lease deadline has passed; wake at the next deadline."""
        while True:
            expired, wake = lapsed(self._runs.values(), time.monotonic(), WATCHDOG_PERIOD)
            for run in expired:
                self._lose(run, "lease expired without renewal")
            if len(self._links) > 1:
                self.rebalance()  # shares left unused move on
            await asyncio.sleep(max(0.0, wake - time.monotonic()))

    async def _execute(self, run: HeldRun, prev: HeldRun | None, lease: LeaseGrant) -> None:
        await self._settle(run, self._start(run, prev, lease))

    async def _start(self, run: HeldRun, prev: HeldRun | None, lease: LeaseGrant) -> ExecResult:
        if prev is not None and prev.task is not None:
            await asyncio.wait({prev.task})  # the old attempt is being killed
        launch = launcher(run.ctx, self._handlers, self._commands if self.runs_commands else None)
        return await run_when_due(run, lease.due_at, self._due_gate, launch)

    def _after_first_step(self, run: HeldRun, outcome: Coroutine[Any, Any, ExecResult]) -> None:
        """A handler run started by ``on_leases``: its result read, or waited for in a task
        if its handler did not end in its first step (``handler_outcomes.first_step``)."""
        res = first_step(run.ctx.run_id, outcome)
        if isinstance(res, Resumed):
            run.task = asyncio.get_running_loop().create_task(self._settle(run, res))
            return
        self._release(run)
        self._report(run, res, self._spools.end(run.ctx.run_id, run.token))

    async def _settle(self, run: HeldRun, outcome: Awaitable[ExecResult]) -> None:
        try:
            try:
                res = await outcome
            except Exception as e:
                res = worker_error(run.ctx.run_id, e)
            # its result goes once its kept output has gone (bounded), its slot held
            spooled = await self._spools.settle(
                run.ctx.run_id, run.token, lambda: run.lost or run.abandoned
            )
        finally:
            self._release(run)
        self._report(run, res, spooled)

    def _release(self, run: HeldRun) -> None:
        """The run's slots and place given back: it ended, or will never be reported."""
        if not run.lost and run.deadline <= time.monotonic():
            # it ended (maybe killed by its supervisor) while this process was frozen
            self._lose(run, "lease expired without renewal")
        self._slots_used -= run.slots
        if not run.lost:
            run.link.held_slots -= run.slots
        if self._runs.get(run.ctx.run_id) is run:
            del self._runs[run.ctx.run_id]
        self.rebalance()

    def _report(self, run: HeldRun, res: ExecResult, spooled: SpoolEnd) -> None:
        """Sends the run's result to its poller (or, seeking one, to every poller), with
        what of its output was dropped (``spooled``)."""
        if res.usage is not None:
            self.usage.observe(res.usage)
        if run.lost or run.abandoned:
            self.stats["dropped_results"] += 1
            return
        self.stats[res.state.value.lower()] += 1
        outcome = run.outcome(res)
        if spooled.truncated:
            outcome = copy_with(
                outcome,
                output_truncated=spooled.truncated,
                output_dropped_bytes=spooled.dropped_bytes,
            )
        if run.seeking:  # no poller renews its lease now: offered to every one
            self._adrift.add(outcome)
            for link in self._links.values():
                if link.connected:
                    self._offer_adrift(link)
            return
        run.link.unacked[(run.ctx.run_id, run.token)] = outcome
        run.link.outbox.result(outcome)
