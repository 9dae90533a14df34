"""Who a ready run goes to: ready runs grouped by what they need, the worker chosen,
why a run waits, and the room asked of workers that share their slots.

A **placement class** is what decides whether a worker could take a run: its task
kind (commands, or the handler's name), the labels it requires, the slots, cpu
and memory it takes, and its owner (a worker takes only the owners of its pool). Runs of one class fit exactly the same workers, so placement
asks once per class and turn whether any connected worker has room for it, and
skips the whole class when none has. Runs nobody can take therefore never delay
runs that can, and a turn costs O(classes × workers) plus the runs it places,
however many runs wait (``ReadyRuns``).

Inside a class, runs wait by priority, by due time. Classes whose best runs share
a priority take turns (round robin), and owners are classes apart, so one owner's
10,000 ready runs do not starve another owner's one.

**Why a run waits** (``why_waiting``) is a pure function of its class and the
connected workers: no worker serves its handler or runs commands, none has its
labels, none is big enough, none has a free slot, or none has the cpu/memory free.
A pool that leaves an owner out counts too: no connected worker takes its runs.
It is worked out when asked (``run get``/``run list`` through the owning poller)
and for the ``shardcron_waiting_runs`` gauge, never stored: the reason changes
with every worker that comes and goes, and writing it would cost a store write on
the hot path. ``WaitReason`` names the gauge's label values, a fixed set (never a
handler name or a label value).

**The worker** (``pick_worker``): the one with the most free slots among those of
the run's owner's pool whose unused capacity covers it. A run triggered ahead of its
due instant (``lease_lead``: only while some worker holds a lease until its run's
instant, ``Hello.waits_for_due``) goes only to such a worker; a run past its
starting deadline (``past_deadline``: strictly past; exactly at it, it is on time)
goes nowhere.

**Demand** (``demand``): for a worker that shares its slots among pollers, how many
slots of ready runs, and of runs coming due, it could take from this one.

Pure: nothing here reads a clock or calls the store.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Iterator
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from shardcron.client.types import CommandTask, Job, JobSpec, Resources, Run
from shardcron.coordinator.poller.timeline import Timeline
from shardcron.coordinator.poller.workers import WorkerBook

ClassKey = tuple[str, tuple[tuple[str, str], ...], int, int, int, str]
_Place = tuple[ClassKey, int, str]  # (class, priority, owner): where a run is queued


class WaitReason(StrEnum):
    """Why a due run is not on a worker yet (the gauge's bounded label values)."""

    NO_WORKER_FOR_OWNER = "no_worker_for_owner"  # no connected worker's pool has it
    NO_WORKER_FOR_HANDLER = "no_worker_for_handler"
    NO_WORKER_FOR_COMMANDS = "no_worker_for_commands"
    NO_WORKER_WITH_LABELS = "no_worker_with_labels"
    NO_CAPACITY = "no_capacity"  # no worker big enough, or none with the cpu/memory free
    NO_FREE_SLOT = "no_free_slot"
    CONCURRENCY_LIMIT = "concurrency_limit"


def class_key(spec: JobSpec, owner: str) -> ClassKey:
    need = spec.resources
    task = spec.task
    kind = "command" if isinstance(task, CommandTask) else f"handler:{task.name}"
    labels = tuple(sorted(need.labels.items()))
    return (kind, labels, need.slots or 1, need.cpu_millis, need.memory_mb, owner)


def _amounts(need: Resources, *, slots: bool) -> str:
    parts = [f"{need.slots or 1} slots"] if slots and (need.slots or 1) > 1 else []
    if need.cpu_millis:
        parts.append(f"{need.cpu_millis} mCPU")
    if need.memory_mb:
        parts.append(f"{need.memory_mb} MB memory")
    return " and ".join(parts)


def why_waiting(
    spec: JobSpec, owner: str, workers: Collection[WorkerBook]
) -> tuple[WaitReason, str]:
    """Why a run of ``spec`` (of ``owner``) is not placed, given the connected workers:
    the first thing, from the owner's pool and the task down to free capacity, that no
    worker offers."""
    task, need = spec.task, spec.resources
    pool = [w for w in workers if w.takes(owner)]
    if workers and not pool:
        return WaitReason.NO_WORKER_FOR_OWNER, f"no connected worker takes runs of owner {owner}"
    workers = pool
    if isinstance(task, CommandTask):
        serving = [w for w in workers if w.runs_commands]
        if not serving:
            return WaitReason.NO_WORKER_FOR_COMMANDS, "no connected worker runs commands"
    else:
        serving = [w for w in workers if task.name in w.handlers]
        if not serving:
            return (
                WaitReason.NO_WORKER_FOR_HANDLER,
                f"no connected worker serves handler {task.name}",
            )
    labelled = [w for w in serving if all(w.labels.get(k) == v for k, v in need.labels.items())]
    labels = ", ".join(f"{k}={v}" for k, v in sorted(need.labels.items()))
    if not labelled:
        return WaitReason.NO_WORKER_WITH_LABELS, f"no worker has label {labels}"
    big = [
        w
        for w in labelled
        if (need.slots or 1) <= w.slots
        and need.cpu_millis <= w.cpu_millis
        and need.memory_mb <= w.memory_mb
    ]
    with_labels = f" with label {labels}" if labels else ""
    if not big:
        return WaitReason.NO_CAPACITY, f"no worker{with_labels} has {_amounts(need, slots=True)}"
    roomy = [w for w in big if w.free >= (need.slots or 1)]
    if roomy and not any(w.fits(spec, owner) for w in roomy):
        free = _amounts(need, slots=False)
        return WaitReason.NO_CAPACITY, f"no worker{with_labels} has {free} free"
    return WaitReason.NO_FREE_SLOT, "waiting for a free slot"


def past_deadline(job: Job, run: Run, now: datetime) -> bool:
    """The run can no longer start: its starting deadline passed (strictly)."""
    deadline = job.spec.starting_deadline
    return deadline is not None and now - run.due_at > deadline


def lease_lead(workers: Iterable[WorkerBook], configured: timedelta) -> timedelta:
    """How far ahead of their due instant runs are triggered: the configured lead while
    some connected worker holds leases until their due instant, else none (every run
    would wait for its instant anyway, set aside)."""
    return configured if any(w.waits_for_due for w in workers) else timedelta(0)


def pick_worker(
    job: Job, owner: str, workers: Iterable[WorkerBook], *, early: bool = False
) -> WorkerBook | None:
    """The worker with the most free slots among those that have room for a run of the
    job, of ``owner``; for a run not due yet (``early``), only among the workers that
    hold a lease until its due instant."""
    best: WorkerBook | None = None
    for w in workers:
        if early and not w.waits_for_due:
            continue
        if w.fits(job.spec, owner) and (best is None or w.free > best.free):
            best = w
    return best


def free_slots(workers: Iterable[WorkerBook]) -> int:
    return sum(w.free for w in workers)


def demand(
    ready: ReadyRuns,
    workers: Collection[WorkerBook],
    coming: Iterable[tuple[JobSpec, str, int]] = (),
) -> dict[WorkerBook, int]:
    """For each worker given, the slots of ``ready`` runs, and of runs ``coming`` due
    ((spec, owner, how many) per placement class: ``coming_classes``), it could take
    (at most its slots)."""
    want = dict.fromkeys(workers, 0)
    needs = [(c.spec, c.owner, c.count) for c in ready.classes()]
    for spec, owner, count in (*needs, *coming):
        need = count * (spec.resources.slots or 1)
        for w in workers:
            if want[w] < w.slots and w.could_run(spec, owner):
                want[w] += need
    return {w: min(n, w.slots) for w, n in want.items()}


def coming_classes(coming: Iterable[tuple[JobSpec, str]]) -> list[tuple[JobSpec, str, int]]:
    """Runs ``coming`` due ((spec, owner) each) counted by placement class (``class_key``),
    so that ``demand`` asks each worker about a class once, not about every run."""
    classes: dict[ClassKey, list[Any]] = {}
    keys: dict[tuple[int, str], ClassKey] = {}  # the runs of one job share its spec
    for spec, owner in coming:
        key = keys.get((id(spec), owner))
        if key is None:
            key = keys[(id(spec), owner)] = class_key(spec, owner)
        entry = classes.get(key)
        if entry is None:
            classes[key] = [spec, owner, 1]
        else:
            entry[2] += 1
    return [(spec, owner, n) for spec, owner, n in classes.values()]


class _Class:
    """The ready runs of one placement class: per priority, per owner, by due time."""

    __slots__ = ("count", "lanes", "owner", "rotations", "spec")

    def __init__(self, spec: JobSpec, owner: str) -> None:
        self.spec = spec  # any run's spec of the class: placement reads only task and resources
        self.owner = owner
        self.count = 0  # runs queued
        # priority -> owner -> its runs by due time; no lane is empty
        self.lanes: dict[int, dict[str, Timeline]] = {}
        self.rotations: dict[int, deque[str]] = {}  # priority -> the lanes' owners, next first

    def top(self) -> int:
        return max(self.lanes)


class ReadyRuns:
    """READY runs (by id) by placement class. A run is queued once (``push``) and leaves when
    it is placed or missed (``take``) or no longer ready (``discard``), at once: a
    class, priority or owner left with no run is dropped with its last one."""

    __slots__ = (
        "_classes",
        "_idle_at",
        "_more",
        "_open",
        "_taken",
        "_version",
        "_where",
    )

    def __init__(self) -> None:
        self._classes: dict[ClassKey, _Class] = {}
        self._where: dict[str, _Place] = {}  # run id -> where it is queued
        self._version = 0  # bumped by every push
        self._idle_at: tuple[object, ...] | None = None  # a pass placed nothing in this state
        self._more = False  # the last pass stopped at its batch limit
        self._open: dict[ClassKey, _Class] = {}  # classes some worker has room for, this pass
        self._taken = 0  # runs placed in this pass

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, run_id: str) -> bool:
        return run_id in self._where

    def __iter__(self) -> Iterator[str]:
        """The run ids queued, in no order."""
        return iter(self._where)

    def clear(self) -> None:
        self._classes.clear()
        self._where.clear()
        self._idle_at = None
        self._more = False

    def worth_a_pass(self) -> bool:
        """Something may be placeable that the last pass did not place."""
        return bool(self._where) and (self._more or self._idle_at is None)

    def push(self, run_id: str, spec: JobSpec, owner: str, priority: int, due: datetime) -> None:
        """Queues a run of ``spec`` and ``owner`` at ``priority``, due at ``due``."""
        if run_id in self._where:
            self.discard(run_id)
        key = class_key(spec, owner)
        cls = self._classes.get(key)
        if cls is None:
            cls = self._classes[key] = _Class(spec, owner)
        owners = cls.lanes.setdefault(priority, {})
        lane = owners.get(owner)
        if lane is None:
            lane = owners[owner] = Timeline()
            cls.rotations.setdefault(priority, deque()).append(owner)
        lane.push(run_id, due)
        self._where[run_id] = (key, priority, owner)
        cls.count += 1
        self._version += 1
        self._idle_at = None

    def discard(self, run_id: str) -> None:
        """The run is no longer READY here."""
        place = self._where.pop(run_id, None)
        if place is None:
            return
        key, priority, owner = place
        cls = self._classes[key]
        cls.count -= 1
        owners = cls.lanes[priority]
        lane = owners[owner]
        lane.remove(run_id)
        if not lane:
            del owners[owner]
            cls.rotations[priority].remove(owner)
            if not owners:
                del cls.lanes[priority]
                del cls.rotations[priority]
        if cls.count == 0:
            del self._classes[key]

    def class_of(self, run_id: str) -> _Class | None:
        place = self._where.get(run_id)
        return None if place is None else self._classes[place[0]]

    def classes(self) -> Iterator[_Class]:
        return iter(self._classes.values())

    def past_due(self, cls: _Class, now: datetime, limit: int) -> list[str]:
        """The class's runs due by ``now``, left in: at most ``limit`` of them (which
        ones, of more, is the lanes' heap order's: not the earliest)."""
        out: list[str] = []
        for owners in cls.lanes.values():
            for lane in owners.values():
                if len(out) >= limit:
                    return out
                out += lane.until(now, limit - len(out))
        return out

    # --- placement --------------------------------------------------------------------

    def _head(self, cls: _Class, priority: int) -> tuple[str, str]:
        """The next owner's earliest run at ``priority``: (owner, run id)."""
        owner = cls.rotations[priority][0]
        first = cls.lanes[priority][owner].first()
        assert first is not None
        return owner, first[1]

    def heads(
        self, workers: Collection[WorkerBook], max_batch: int
    ) -> Iterator[tuple[str, _Class, ClassKey, int, str]]:
        """Candidates (run ids) in placement order, each with where it is queued: the
        highest priority first over every class some worker has room for now; within
        one priority, classes and owners in turn. For each, the caller says it was dealt
        with (``passed``) and takes the run out (it is placed, ended or set aside), or
        closes its class for the pass (``close``): either way the next candidate
        differs. Stops after ``max_batch`` placed."""
        self._more = False
        state = _capacity(workers, self._version)
        if state == self._idle_at:
            return
        self._taken = 0
        self._open = {
            key: cls
            for key, cls in self._classes.items()
            if any(w.fits(cls.spec, cls.owner) for w in workers)
        }
        while True:
            self._open = {k: c for k, c in self._open.items() if c.count > 0}
            if not self._open:
                break
            top = max(cls.top() for cls in self._open.values())
            for key, cls in [(k, c) for k, c in self._open.items() if c.top() == top]:
                if key not in self._open or top not in cls.lanes:
                    continue  # closed, or emptied, meanwhile
                owner, run_id = self._head(cls, top)
                yield run_id, cls, key, top, owner
                if self._taken >= max_batch:
                    self._more = True
                    return
        if self._taken == 0:
            self._idle_at = _capacity(workers, self._version)

    def passed(self, cls: _Class, priority: int, owner: str, *, placed: bool) -> None:
        """The head ``heads`` yielded is dealt with (the caller takes it out): its owner
        goes to the back of its priority's turn."""
        rotation = cls.rotations.get(priority)
        if rotation and rotation[0] == owner:
            rotation.rotate(-1)
        if placed:
            self._taken += 1

    def close(self, key: ClassKey) -> None:
        """No worker has room for this class any more in this pass."""
        self._open.pop(key, None)


def _capacity(workers: Collection[WorkerBook], version: int) -> tuple[object, ...]:
    """What placement depends on besides the runs: each worker's free capacity."""
    return (version, *((id(w), w.free, w.used_cpu, w.used_mem) for w in workers))
