"""Placement by class (coordinator/poller/placement.py): runs nobody can take never
hold up runs that can, owners take turns, and a waiting run says why."""

from __future__ import annotations

from datetime import timedelta

from shardcron.client.types import CommandTask, HandlerTask, Resources
from shardcron.coordinator.poller.placement import WaitReason, why_waiting
from shardcron.coordinator.poller.table import Slot
from shardcron.coordinator.poller.workers import WorkerBook
from tests.support.held_runs import T0, Held, job, lease_all, worker


class CountingWorker(WorkerBook):
    """A worker that counts how often placement asks whether a run fits."""

    fits_calls = 0

    def fits(self, spec, owner):  # type: ignore[no-untyped-def]
        CountingWorker.fits_calls += 1
        return super().fits(spec, owner)


def counting_worker(slots: int) -> CountingWorker:
    w = worker(slots=slots)
    counted = CountingWorker.__new__(CountingWorker)
    for name in WorkerBook.__slots__:
        setattr(counted, name, getattr(w, name))
    return counted


def admit(h: Held, s: Slot) -> Slot:
    h.admit(s, fresh_fire=False)
    return s


def test_runs_nobody_can_take_never_delay_runs_that_can() -> None:
    """Placement gave up after 4×free+64 runs it could not place, so 100 runs naming
    a handler no worker serves kept every other owner's runs PENDING. Now a class
    no worker has room for is skipped whole, however many runs it holds."""
    h = Held()
    nobody = job("nobody", task=HandlerTask(name="nobody-serves-this"))
    for i in range(10_000):
        admit(h, h.slot(nobody, priority=9, due=T0 - timedelta(seconds=i), owner="poison"))
    victim = admit(h, h.slot(job("victim"), owner="victim"))
    w = counting_worker(slots=2)
    CountingWorker.fits_calls = 0
    assert lease_all(h, [w]) == [(victim.run.id, "w")]
    assert CountingWorker.fits_calls <= 4, "a pass looked at the runs one by one"
    assert len(h.table.ready) == 10_000

    # one look at each class after the lease changed capacity, then none while
    # nothing changes; a new run is placed at once
    CountingWorker.fits_calls = 0
    for _ in range(100):
        assert lease_all(h, [w]) == []
    assert CountingWorker.fits_calls == 1
    late = admit(h, h.slot(job("late"), owner="victim"))
    assert lease_all(h, [w]) == [(late.run.id, "w")]


def test_owners_share_free_slots_round_robin() -> None:
    h = Held()
    j = job()
    hog = [
        admit(h, h.slot(j, due=T0 - timedelta(hours=1, seconds=i), owner="hog"))
        for i in range(10_000)
    ]
    small = admit(h, h.slot(j, due=T0, owner="small"))
    other = admit(h, h.slot(j, due=T0, owner="other"))
    placed = lease_all(h, [worker(slots=4)])
    # one each in turn, each owner's own runs by due time
    assert [r for r, _ in placed] == [hog[-1].run.id, small.run.id, other.run.id, hog[-2].run.id]


def test_a_higher_priority_goes_first_whoever_owns_it() -> None:
    h = Held()
    j = job()
    for i in range(50):
        admit(h, h.slot(j, due=T0 - timedelta(seconds=i), owner="a"))
    urgent = admit(h, h.slot(j, priority=5, due=T0, owner="b"))
    cmd = job("cmd", task=CommandTask(argv=("true",)))
    urgent_cmd = admit(h, h.slot(cmd, priority=7, owner="c"))
    w = worker(slots=3, runs_commands=True)
    assert [r for r, _ in lease_all(h, [w])][:2] == [urgent_cmd.run.id, urgent.run.id]


def test_a_class_is_looked_at_again_when_a_worker_for_it_connects() -> None:
    h = Held()
    gpu = admit(h, h.slot(job("gpu", resources=Resources(labels={"gpu": "a100"}))))
    plain = worker("plain")
    assert lease_all(h, [plain]) == []
    assert not h.table.ready.worth_a_pass()  # no pass is worth it until something changes
    assert lease_all(h, [plain, worker("gpu", labels={"gpu": "a100"})]) == [(gpu.run.id, "gpu")]


def test_a_waiting_run_says_why() -> None:
    h = Held()
    handler = admit(h, h.slot(job("h", task=HandlerTask(name="resize"))))
    cmd = admit(h, h.slot(job("c", task=CommandTask(argv=("true",)))))
    gpu = admit(h, h.slot(job("g", resources=Resources(labels={"gpu": "a100"}))))
    big = admit(h, h.slot(job("b", resources=Resources(cpu_millis=4000, labels={"gpu": "a100"}))))
    busy = admit(h, h.slot(job("f")))
    gpus = worker("gpus", slots=1, cpu_millis=2000, labels={"gpu": "a100"})
    plain = worker("plain", slots=1)
    for w in (gpus, plain):
        w.hold("elsewhere", Resources())
    workers = [gpus, plain]
    reasons = h.leasing.waiting_reasons([s.run.id for s in (handler, cmd, gpu, big, busy)], workers)
    assert reasons == {
        handler.run.id: "no connected worker serves handler resize",
        cmd.run.id: "no connected worker runs commands",
        gpu.run.id: "waiting for a free slot",
        big.run.id: "no worker with label gpu=a100 has 4000 mCPU",
        busy.run.id: "waiting for a free slot",
    }
    assert why_waiting(gpu.job.spec, "o", [plain]) == (  # type: ignore[union-attr]
        WaitReason.NO_WORKER_WITH_LABELS,
        "no worker has label gpu=a100",
    )
    roomy = worker("roomy", slots=2, cpu_millis=4000, labels={"gpu": "a100"})
    roomy.hold("elsewhere", Resources(cpu_millis=1000))
    assert why_waiting(big.job.spec, "o", [roomy]) == (  # type: ignore[union-attr]
        WaitReason.NO_CAPACITY,
        "no worker with label gpu=a100 has 4000 mCPU free",
    )

    limited = job("limited", max_concurrent=2)
    running = [admit(h, h.slot(limited)) for _ in range(2)]
    queued = admit(h, h.slot(limited))
    assert h.leasing.waiting_reasons([queued.run.id], workers) == {
        queued.run.id: "waiting for the job's concurrency limit (2 running)"
    }
    counts = h.leasing.waiting_counts(workers)
    assert counts == {
        WaitReason.NO_WORKER_FOR_OWNER: 0,
        WaitReason.NO_WORKER_FOR_HANDLER: 1,
        WaitReason.NO_WORKER_FOR_COMMANDS: 1,
        WaitReason.NO_WORKER_WITH_LABELS: 0,
        WaitReason.NO_CAPACITY: 1,
        WaitReason.NO_FREE_SLOT: 2 + len(running),
        WaitReason.CONCURRENCY_LIMIT: 1,
    }


def test_a_worker_pool_takes_only_its_owners_runs() -> None:
    h = Held()
    j = job()
    theirs = [admit(h, h.slot(j, due=T0 - timedelta(seconds=i), owner="b")) for i in range(3)]
    ours = admit(h, h.slot(j, due=T0, owner="a"))
    pool_a = worker("pool-a", slots=4, owners=frozenset({"a"}))
    assert lease_all(h, [pool_a]) == [(ours.run.id, "pool-a")]
    workers = [pool_a]
    assert why_waiting(j.spec, "b", workers) == (
        WaitReason.NO_WORKER_FOR_OWNER,
        "no connected worker takes runs of owner b",
    )
    assert h.leasing.waiting_counts(workers)[WaitReason.NO_WORKER_FOR_OWNER] == 3
    # a worker of every owner takes the rest
    anyone = worker("anyone", slots=4)
    assert sorted(r for r, _ in lease_all(h, [pool_a, anyone])) == sorted(s.run.id for s in theirs)
