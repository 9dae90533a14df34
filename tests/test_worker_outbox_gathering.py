"""How long a worker's starts, results and credit limits wait for company (``Outbox``):
with slots to spare they gather into few messages, a run's Started dropped when its
result goes in the same flush; with slots scarce they go at once, so a poller waiting
for the slots they free is not kept waiting, unless results are streaming in: then a
short wait gives each message company."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from shardcron.client.stream import Credits, Heartbeat, LeaseRef, Results, RunOutcome, Started
from shardcron.client.types import RunState
from shardcron.worker.link import PollerLink
from shardcron.worker.outbox import MAX_RESULTS_MESSAGE, Outbox

AT = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
LONG = 3600.0  # a gathering time no test waits out


def ref(i: int) -> LeaseRef:
    return LeaseRef(run_id=f"r{i}", fencing_token=100 + i, job_id="j")


def outcome(i: int) -> RunOutcome:
    return RunOutcome(
        run_id=f"r{i}", fencing_token=100 + i, state=RunState.SUCCEEDED, started_at=AT, ended_at=AT
    )


def take(box: Outbox) -> asyncio.Task[list]:
    return asyncio.ensure_future(box.take(asyncio.Event(), lambda: Heartbeat()))


async def test_reports_gather_into_one_flush_and_a_result_stands_for_its_start() -> None:
    box = Outbox(patient=lambda: True, gather=0.2)
    box.started(ref(1), AT)
    box.started(ref(2), AT)
    taking = take(box)
    await asyncio.sleep(0.05)
    assert not taking.done()  # gathering
    box.result(outcome(1))
    box.credits(7)
    sent = await asyncio.wait_for(taking, 5)
    kinds = [type(m) for m in sent]
    assert kinds == [Credits, Started, Results]
    started = next(m for m in sent if isinstance(m, Started))
    assert [r.run_id for r in started.leases] == ["r2"]  # r1's result says it started
    assert [o.run_id for o in sent[-1].outcomes] == ["r1"]
    assert sent[0].limit == 7


async def test_a_start_alone_is_sent_once_gathered() -> None:
    box = Outbox(patient=lambda: True, gather=0.01)
    box.started(ref(1), AT)
    sent = await asyncio.wait_for(take(box), 5)
    assert [type(m) for m in sent] == [Started] and sent[0].leases == (ref(1),)


async def test_scarce_slots_send_reports_at_once() -> None:
    scarce = False
    box = Outbox(patient=lambda: not scarce, gather=LONG)
    box.result(outcome(1))
    taking = take(box)
    await asyncio.sleep(0.05)
    assert not taking.done()
    scarce = True  # the next look finds a poller waiting for slots
    box.interrupt()
    sent = await asyncio.wait_for(taking, 5)
    assert [o.run_id for o in sent[0].outcomes] == ["r1"]
    box.result(outcome(2))
    sent = await asyncio.wait_for(take(box), 5)
    assert [o.run_id for o in sent[0].outcomes] == ["r2"]


async def test_a_full_message_of_results_goes_without_waiting() -> None:
    box = Outbox(patient=lambda: True, gather=LONG)
    box.result(outcome(0))
    taking = take(box)
    await asyncio.sleep(0.05)
    assert not taking.done()
    for i in range(1, MAX_RESULTS_MESSAGE):
        box.result(outcome(i))
    sent = await asyncio.wait_for(taking, 5)
    assert sum(len(m.outcomes) for m in sent) == MAX_RESULTS_MESSAGE


@pytest.mark.parametrize("patient", [True, False])
async def test_refusals_and_heartbeats_never_wait(patient: bool) -> None:
    box = Outbox(patient=lambda: patient, gather=LONG)
    box.refused(ref(1))
    sent = await asyncio.wait_for(take(box), 5)
    assert [r.run_id for r in sent[0].leases] == ["r1"]
    box.heartbeat()
    sent = await asyncio.wait_for(take(box), 5)
    assert isinstance(sent[0], Heartbeat)


async def test_gathered_starts_keep_their_own_instants() -> None:
    box = Outbox(patient=lambda: True, gather=0.01)
    later = AT + timedelta(milliseconds=8)
    box.started(ref(1), AT)
    box.started(ref(2), AT)
    box.started(ref(3), later)  # past START_TOLERANCE of the first
    sent = await asyncio.wait_for(take(box), 5)
    assert [(m.at, [r.run_id for r in m.leases]) for m in sent] == [
        (AT, ["r1", "r2"]),
        (later, ["r3"]),
    ]


class _Owner:
    """What a link's patience reads of its worker."""

    spare = True

    def slots_to_spare(self) -> bool:
        return self.spare


def test_reports_wait_only_while_no_poller_waits_for_slots() -> None:
    owner = _Owner()
    link = PollerLink(owner, "127.0.0.1:1")  # type: ignore[arg-type]
    link.sent_limit, link.held_slots = 64, 10
    assert link._reports_can_wait()  # 54 of 64 free as the poller sees it
    link.held_slots = 20
    for i in range(20):  # runs ended, their results queued: still held, to the poller
        link.outbox.result(outcome(i))
    assert not link._reports_can_wait()  # 24 of 64
    link.held_slots = 0
    assert link._reports_can_wait()
    owner.spare = False  # pollers asked for more slots than are free
    assert not link._reports_can_wait()


async def test_with_slots_scarce_results_coming_fast_gather_and_a_lone_one_does_not() -> None:
    """Slots scarce: results that have been coming faster than two to a gathering window
    wait for company (a freed slot waits that long at most); one after a pause goes at
    once."""
    box = Outbox(patient=lambda: False, gather=LONG, scarce_gather=0.2)
    for i in range(4):  # a stream of results, 10 ms apart
        box.result(outcome(i))
        await asyncio.sleep(0.01)
    box._results.clear()  # as if they went; the pace is remembered
    box.result(outcome(10))
    taking = take(box)
    await asyncio.sleep(0.05)
    assert not taking.done()  # gathering
    box.result(outcome(11))
    sent = await asyncio.wait_for(taking, 5)
    assert [o.run_id for o in sent[0].outcomes] == ["r10", "r11"]
    await asyncio.sleep(0.4)  # a pause: the next result is alone
    box.result(outcome(12))
    await asyncio.sleep(0.3)
    box.result(outcome(13))
    sent = await asyncio.wait_for(take(box), 0.1)
    assert [o.run_id for o in sent[0].outcomes] == ["r12", "r13"]
    box.result(outcome(14))
    sent = await asyncio.wait_for(take(box), 0.1)  # sent at once, not after 0.2 s
    assert [o.run_id for o in sent[0].outcomes] == ["r14"]
