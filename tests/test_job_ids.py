"""Job ids: UUIDv7, unique, ascending within a process, also across calls."""

from __future__ import annotations

import time
import uuid

from shardcron.coordinator.ids import new_job_id, new_job_ids


def test_job_ids_are_uuid7_and_ascend() -> None:
    before = time.time_ns() // 1_000_000
    ids = new_job_ids(3000) + [new_job_id()] + new_job_ids(2)
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    for job_id in ids:
        parsed = uuid.UUID(job_id)
        assert str(parsed) == job_id
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122
    assert int(ids[0].replace("-", "")[:12], 16) >= before


def test_job_ids_differ_in_their_random_bits() -> None:
    tails = {job_id[15:] for job_id in new_job_ids(1000)}  # past the time prefix
    assert len(tails) == 1000


def test_job_ids_of_a_burst_do_not_run_ahead_of_the_clock() -> None:
    """Regression: ids made faster than one per millisecond took one millisecond each,
    so 10,000 jobs created in a second carried times up to 10 s in the future."""
    ids = new_job_ids(10_000)
    newest = int(ids[-1].replace("-", "")[:12], 16)
    assert newest <= time.time_ns() // 1_000_000 + 3  # 4,096 per ms before one is borrowed
