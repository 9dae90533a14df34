"""A batch create's request: a spec shared by many jobs is encoded once, each job's own."""

from __future__ import annotations

import pytest

from shardcron.client.codec import job_spec_to_proto
from shardcron.client.errors import InvalidArgument
from shardcron.client.sdk.messages import create_jobs_request
from shardcron.client.types import HandlerTask, JobSpec

SHARED = JobSpec(name="shared", task=HandlerTask(name="noop"))
OTHER = JobSpec(name="other", task=HandlerTask(name="noop"), priority=5)


def test_each_job_carries_its_own_spec_and_key() -> None:
    request = create_jobs_request([SHARED, (SHARED, "key"), OTHER, SHARED], ids_only=True)
    assert [(j.spec, j.idempotency_key) for j in request.jobs] == [
        (job_spec_to_proto(SHARED, "spec"), ""),
        (job_spec_to_proto(SHARED, "spec"), "key"),
        (job_spec_to_proto(OTHER, "spec"), ""),
        (job_spec_to_proto(SHARED, "spec"), ""),
    ]
    assert request.ids_only


def test_jobs_of_one_spec_do_not_share_a_message() -> None:
    request = create_jobs_request([SHARED, SHARED])
    request.jobs[0].spec.name = "changed"
    assert request.jobs[1].spec.name == "shared"


def test_a_spec_protobuf_cannot_hold_is_named_by_its_job() -> None:
    too_big = JobSpec(name="big", task=HandlerTask(name="noop"), priority=1 << 40)
    with pytest.raises(InvalidArgument) as error:
        create_jobs_request([SHARED, too_big])
    assert error.value.field.startswith("jobs[1].spec")
