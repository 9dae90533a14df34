"""Ready runs grouped by what they need, and why a run waits.

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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterator
from enum import StrEnum

from shardcron.client.types import CommandTask, JobSpec, Resources
from shardcron.coordinator.poller.state import Phase, Slot
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
    """READY runs by placement class. A run is queued once (``push``) and leaves when
    it is placed or missed (``take``) or no longer ready (``discard``), at once: a
    class, priority or owner left with no run is dropped with its last one."""

    __slots__ = (
        "_classes",
        "_idle_at",
        "_more",
        "_open",
        "_slots",
        "_taken",
        "_version",
        "_where",
    )

    def __init__(self) -> None:
        self._classes: dict[ClassKey, _Class] = {}
        self._slots: dict[str, Slot] = {}  # the runs queued, by run id
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

    def clear(self) -> None:
        self._classes.clear()
        self._slots.clear()
        self._where.clear()
        self._idle_at = None
        self._more = False

    def worth_a_pass(self) -> bool:
        """Something may be placeable that the last pass did not place."""
        return bool(self._where) and (self._more or self._idle_at is None)

    def push(self, slot: Slot) -> None:
        assert slot.job is not None
        run = slot.run
        if run.id in self._where:
            self.discard(run.id)
        key = class_key(slot.job.spec, run.owner)
        cls = self._classes.get(key)
        if cls is None:
            cls = self._classes[key] = _Class(slot.job.spec, run.owner)
        owners = cls.lanes.setdefault(run.priority, {})
        lane = owners.get(run.owner)
        if lane is None:
            lane = owners[run.owner] = Timeline()
            cls.rotations.setdefault(run.priority, deque()).append(run.owner)
        lane.push(run.id, run.due_at)
        self._slots[run.id] = slot
        self._where[run.id] = (key, run.priority, run.owner)
        cls.count += 1
        self._version += 1
        self._idle_at = None

    def discard(self, run_id: str) -> None:
        """The run is no longer READY here."""
        place = self._where.pop(run_id, None)
        if place is None:
            return
        key, priority, owner = place
        del self._slots[run_id]
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

    # --- placement --------------------------------------------------------------------

    def _head(self, cls: _Class, priority: int) -> tuple[str, Slot]:
        """The next owner's earliest run at ``priority``."""
        owner = cls.rotations[priority][0]
        first = cls.lanes[priority][owner].first()
        assert first is not None
        slot = self._slots[first[1]]
        assert slot.phase == Phase.READY
        return owner, slot

    def heads(
        self, workers: Collection[WorkerBook], max_batch: int
    ) -> Iterator[tuple[Slot, _Class, ClassKey, int, str]]:
        """Candidates in placement order, each with where it is queued: the highest
        priority first over every class some worker has room for now; within one
        priority, classes and owners in turn. The caller dequeues a candidate it
        places or ends (``take``), or closes its class for the pass (``close``) —
        either way the next candidate differs. Stops after ``max_batch`` taken."""
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
                owner, slot = self._head(cls, top)
                yield slot, cls, key, top, owner
                if self._taken >= max_batch:
                    self._more = True
                    return
        if self._taken == 0:
            self._idle_at = _capacity(workers, self._version)

    def take(self, cls: _Class, priority: int, owner: str, *, placed: bool) -> None:
        """Dequeues the head ``heads`` yielded; its owner goes to the back."""
        first = cls.lanes[priority][owner].first()
        assert first is not None
        self.discard(first[1])
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
