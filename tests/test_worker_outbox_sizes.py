"""What a worker sends stays under what a node takes in one message (4 MiB), however
many leases it holds: a worker holding 50,000 leases given ahead of a storm's instant
sent a Heartbeat and a Started of 4.4 MB each, the node refused them, and every lease
lapsed. Regression tests for that bug: lease refs go at most ``MAX_HEARTBEAT_LEASES``
to a message, encoded as the worker sends them."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from shardcron.client.codec.stream import encode_worker_message
from shardcron.client.stream import (
    Heartbeat,
    LeaseRef,
    ResultFilePiece,
    ResultFiles,
    RunOutcome,
    Started,
)
from shardcron.client.types import RunState
from shardcron.coordinator.service import MAX_MESSAGE_BYTES
from shardcron.worker.outbox import MAX_HEARTBEAT_LEASES, MAX_OUTPUT_MESSAGE, Outbox

HELD = 50_000


def refs(n: int) -> list[LeaseRef]:
    job = "01a21965-6084-7000-a8e0-76197fb3205c"
    return [
        LeaseRef(
            run_id=f"01a21961-f5a0-80b5-b308-{i:012d}", fencing_token=(7 << 32) | i, job_id=job
        )
        for i in range(n)
    ]


async def drained(outbox: Outbox, beat: Heartbeat) -> list:
    return await outbox.take(asyncio.Event(), lambda: beat)


async def test_a_heartbeat_naming_a_storm_of_leases_goes_in_messages_a_node_takes() -> None:
    held = refs(HELD)
    outbox = Outbox()
    outbox.heartbeat()
    sent = await drained(outbox, Heartbeat(leases=tuple(held)))
    assert all(isinstance(m, Heartbeat) for m in sent) and len(sent) > 1
    assert [r for m in sent for r in m.leases] == held
    assert max(len(encode_worker_message(m).SerializeToString()) for m in sent) < MAX_MESSAGE_BYTES
    assert max(len(m.leases) for m in sent) <= MAX_HEARTBEAT_LEASES


async def test_a_storm_of_runs_started_at_one_instant_goes_in_messages_a_node_takes() -> None:
    held = refs(HELD)
    at = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    outbox = Outbox()
    for ref in held:
        outbox.started(ref, at)
    sent = await drained(outbox, Heartbeat())
    assert all(isinstance(m, Started) and m.at == at for m in sent) and len(sent) > 1
    assert [r for m in sent for r in m.leases] == held
    assert max(len(encode_worker_message(m).SerializeToString()) for m in sent) < MAX_MESSAGE_BYTES


async def test_a_runs_result_files_go_before_its_result_in_messages_a_node_takes() -> None:
    """Pieces of result files leave with output, before the run's result (the node ends
    the run's files at its result), merged into messages within the output's size."""
    outbox = Outbox()
    sha = "0" * 64
    size = 40 * MAX_OUTPUT_MESSAGE // 64
    for i, at in enumerate(range(0, size, 1 << 12)):
        outbox.result_piece(
            ResultFilePiece(
                run_id="r", fencing_token=1, name="f", offset=at, data=b"x" * (1 << 12),
                size=size, sha256=sha, last=at + (1 << 12) >= size,
            )
        )  # fmt: skip
        if i == 3:
            outbox.output("r", 1, "stdout", b"line\n")
    outbox.result(RunOutcome(run_id="r", fencing_token=1, state=RunState.SUCCEEDED))
    sent = await drained(outbox, Heartbeat())
    kinds = [type(m).__name__ for m in sent]
    assert kinds[-1] == "Results" and "ResultFiles" in kinds and "Output" in kinds
    pieces = [p for m in sent if isinstance(m, ResultFiles) for p in m.pieces]
    assert [p.offset for p in pieces] == list(range(0, size, 1 << 12))
    assert max(len(encode_worker_message(m).SerializeToString()) for m in sent) < (
        2 * MAX_OUTPUT_MESSAGE
    )
