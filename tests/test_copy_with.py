"""``copy_with`` gives what ``dataclasses.replace`` gives, for the domain's frozen types."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from shardcron.client.dataclass_copies import copy_with
from shardcron.client.types import HandlerTask, Job, JobSpec, JobState, Run, RunState
from shardcron.coordinator.store import JobProgress

AT = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
RUN = Run(
    id="r", job_id="j", owner="o", fire_key="k", fire_at=AT, due_at=AT, state=RunState.PENDING
)
JOB = Job(
    id="j",
    owner="o",
    spec=JobSpec(name="n", task=HandlerTask(name="noop")),
    state=JobState.ACTIVE,
    version=1,
    schedule_version=1,
    created_at=AT,
    updated_at=AT,
)


@pytest.mark.parametrize(
    ("obj", "changes"),
    [
        (RUN, {"state": RunState.LEASED, "worker_id": "w", "lease_token": 7}),
        (RUN, {}),
        (JOB, {"state": JobState.COMPLETED, "next_fire_at": None}),
        (JobProgress(job_id="j"), {"state": JobState.PAUSED, "pause_reason": "why"}),
    ],
)
def test_copy_with_equals_replace(obj: object, changes: dict[str, object]) -> None:
    copied = copy_with(obj, **changes)
    assert copied == dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    assert copied is not obj
    assert type(copied) is type(obj)


def test_copy_with_leaves_the_original_alone() -> None:
    copy_with(RUN, state=RunState.FAILED)
    assert RUN.state == RunState.PENDING


def test_copy_with_refuses_an_unknown_field() -> None:
    with pytest.raises(TypeError):
        copy_with(RUN, no_such_field=1)


def test_copy_with_runs_the_checks_of_a_class_that_has_them() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Checked:
        n: int

        def __post_init__(self) -> None:
            if self.n < 0:
                raise ValueError("negative")

    assert copy_with(Checked(n=1), n=2) == Checked(n=2)
    with pytest.raises(ValueError, match="negative"):
        copy_with(Checked(n=1), n=-1)
