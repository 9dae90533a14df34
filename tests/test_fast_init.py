"""``fast_init`` builds what the ``__init__`` of ``dataclass`` builds, for the domain's
frozen types, and leaves alone the classes it cannot match exactly."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import UTC, datetime, timedelta

import pytest

from shardcron.client.dataclass_copies import fast_init
from shardcron.client.stream import LeaseGrant
from shardcron.client.types import HandlerTask, Resources
from tests.support.store_builders import make_job, make_run

AT = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


@fast_init
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    name: str
    count: int = 3
    tags: dict[str, str] = dataclasses.field(default_factory=dict)


def test_the_fast_init_gives_equal_values_with_defaults_and_factories() -> None:
    made = Sample(name="a")
    assert (made.name, made.count, made.tags) == ("a", 3, {})
    assert Sample(name="a").tags is not made.tags  # a fresh default each time
    assert Sample(name="b", count=5, tags={"k": "v"}).tags == {"k": "v"}
    assert "count=3" in str(inspect.signature(Sample.__init__))
    assert "__create_fn__" not in Sample.__init__.__qualname__  # replaced


def test_the_fast_init_keeps_the_frozen_type_frozen_and_its_errors() -> None:
    made = Sample(name="a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.name = "b"  # type: ignore[misc]
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'name'"):
        Sample()
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        Sample(name="a", bogus=1)
    with pytest.raises(TypeError):
        Sample("a")  # keyword-only, as before


def test_the_domain_types_built_fast_hold_what_they_were_given_and_their_defaults() -> None:
    job = make_job(idempotency_key="k")
    assert (job.version, job.idempotency_key, job.next_fire_at) == (1, "k", None)
    run = make_run(job, error="e")
    assert (run.job_id, run.error, run.attempt, run.lease_expires_at) == (job.id, "e", 1, None)
    assert dataclasses.replace(run) == run
    grant = LeaseGrant(
        run_id=run.id, job_id=job.id, owner="o", fencing_token=1, attempt=1, fire_at=AT,
        due_at=AT, task=HandlerTask(name="noop"), timeout=None,
        lease_ttl=timedelta(seconds=30), resources=Resources(),
    )  # fmt: skip
    assert (grant.job_name, grant.expires_at) == ("", None)


def test_a_class_with_post_init_keeps_its_own_init() -> None:
    seen: list[int] = []
    made = dataclasses.dataclass(frozen=True, slots=True, kw_only=True)(
        type("Noted", (), {"__annotations__": {"n": "int"},
                           "__post_init__": lambda self: seen.append(self.n)})
    )  # fmt: skip
    own = made.__init__
    assert fast_init(made).__init__ is own
    made(n=4)
    assert seen == [4]
