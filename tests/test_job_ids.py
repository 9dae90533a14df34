"""Job ids: UUIDv7, unique, ascending within a process, also across calls. Run ids:
UUIDv8, the same for the same job, fire and attempt, on every version (they are stored).
A placed job id: its random bits drawn again until its shard is one wanted."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

from shardcron.coordinator.ids import (
    new_job_id,
    new_job_ids,
    placed_job_id,
    run_due_at,
    run_id,
    shard_for,
)


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


def test_run_ids_are_uuid8_and_stay_what_they_were() -> None:
    # values made by the first implementation: a run's id is stored, and a fire made
    # again (after a crash, by the next poller of its shard) must give the same row
    due = datetime(2026, 6, 1, 12, 0, 0, 123456, tzinfo=UTC)
    job = "01a214ec-bebd-737a-9372-2cb5480e4a39"
    assert run_id(job, "2026-06-01T12:00:00+00:00", 2, due) == (
        "019e830e-1a7b-822d-8dd0-e7bfe047d1dd"
    )
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert run_id("j", "now:x", 1, epoch) == "00000000-0000-880d-b6c2-3f8b774abf8e"
    for attempt in range(1, 50):
        parsed = uuid.UUID(run_id(job, f"k{attempt}", attempt, due))
        assert parsed.version == 8 and parsed.variant == uuid.RFC_4122
        assert parsed.int >> 80 == int(due.timestamp() * 1000)


def test_a_run_id_tells_its_due_instant_to_the_millisecond() -> None:
    due = datetime(2026, 11, 27, 15, 4, 5, 678_901, tzinfo=UTC)
    assert run_due_at(run_id("job", "now", 1, due)) == due.replace(microsecond=678_000)


def test_text_not_shaped_as_a_run_id_tells_no_due_instant() -> None:
    assert run_due_at("r1") is None
    assert run_due_at("0192f1e2x3c4-8000-8000-000000000000") is None  # no dash at 8
    assert run_due_at("0192f1e2-3c4g-8000-8000-000000000000") is None  # not hex
    assert run_due_at("ffffffff-ffff-8000-8000-000000000000") is None  # past the year 9999


def test_a_placed_job_id_lands_on_a_wanted_shard_and_keeps_its_instant() -> None:
    wanted = {0, 1, 2, 3, 4, 5}  # of 8: a draw misses with chance 1/4, 17 draws 1/4**17
    ids = new_job_ids(200)
    placed = [placed_job_id(job_id, wanted.__contains__, 8) for job_id in ids]
    assert all(shard_for(job_id, 8) in wanted for job_id in placed)
    assert sum(a != b for a, b in zip(ids, placed, strict=True)) > 20  # a quarter moved
    assert placed == sorted(placed)  # still ascending: the instant and counter stay
    assert len(set(placed)) == len(placed)
    for before, after in zip(ids, placed, strict=True):
        assert after[:18] == before[:18]  # 48 bits of milliseconds, version, counter
        parsed = uuid.UUID(after)
        assert str(parsed) == after
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122


def test_a_job_id_no_draw_places_is_kept() -> None:
    job_id = new_job_id()
    assert placed_job_id(job_id, lambda shard: False, 8) == job_id
    tried: list[int] = []
    placed_job_id(job_id, lambda shard: tried.append(shard) is None and False, 8, tries=5)
    assert len(tried) == 6  # the id as given, then each draw
