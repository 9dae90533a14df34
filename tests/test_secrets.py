"""Secret env values: write-only on the job API, merged by one rule on update."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shardcron.client import codec
from shardcron.client.errors import InvalidArgument
from shardcron.client.types import (
    SECRET_PLACEHOLDER,
    CommandTask,
    HandlerTask,
    Job,
    JobSpec,
    JobState,
)
from shardcron.coordinator.secrets import secrets_for_create, secrets_for_update
from shardcron.coordinator.validation import validate_spec

SECRET = "hunter2-never-shown"


def spec(secret_env: dict[str, str], env: dict[str, str] | None = None) -> JobSpec:
    task = CommandTask(argv=("true",), env=env or {}, secret_env=secret_env)
    return JobSpec(name="j", task=task)


def job(s: JobSpec) -> Job:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return Job(
        id="j1", owner="o", spec=s, state=JobState.ACTIVE, version=1, created_at=now, updated_at=now
    )


def test_replies_show_keys_with_a_placeholder_never_values() -> None:
    reply = codec.job_to_proto(job(spec({"DB_PASSWORD": SECRET})))
    assert dict(reply.spec.task.command.secret_env) == {"DB_PASSWORD": SECRET_PLACEHOLDER}
    assert SECRET.encode() not in reply.SerializeToString()
    inner = codec.job_to_proto(job(spec({"DB_PASSWORD": SECRET})), redact=False)
    assert inner.spec.task.command.secret_env["DB_PASSWORD"] == SECRET


def test_the_sdk_sends_values_and_reads_placeholders_back() -> None:
    sent = codec.job_spec_to_proto(spec({"K": SECRET}))
    assert codec.job_spec_from_proto(sent).task.secret_env == {"K": SECRET}


def test_repr_never_shows_a_secret() -> None:
    assert SECRET not in repr(job(spec({"K": SECRET})))


def test_create_refuses_a_placeholder_and_drops_empty_values() -> None:
    with pytest.raises(InvalidArgument) as e:
        secrets_for_create(spec({"K": SECRET_PLACEHOLDER}))
    assert e.value.field == "spec.task.command.secret_env[K]"
    kept = secrets_for_create(spec({"K": SECRET, "EMPTY": ""}))
    assert kept.task.secret_env == {"K": SECRET}


def test_update_keeps_what_it_does_not_mention_and_removes_empty_values() -> None:
    stored = spec({"A": "a1", "B": "b1", "C": "c1"})
    sent = spec({"A": SECRET_PLACEHOLDER, "B": "", "D": "d2"})
    assert secrets_for_update(stored, sent).task.secret_env == {"A": "a1", "C": "c1", "D": "d2"}


def test_update_refuses_a_placeholder_for_a_key_never_stored() -> None:
    with pytest.raises(InvalidArgument) as e:
        secrets_for_update(spec({}), spec({"NEW": SECRET_PLACEHOLDER}))
    assert e.value.field == "spec.task.command.secret_env[NEW]"


def test_update_to_a_handler_drops_the_secrets() -> None:
    handler = JobSpec(name="j", task=HandlerTask(name="h"))
    assert secrets_for_update(spec({"A": "a"}), handler) == handler


def test_a_key_in_env_and_secret_env_is_refused_without_echoing_the_value() -> None:
    with pytest.raises(InvalidArgument) as e:
        validate_spec(spec({"K": SECRET}, env={"K": "plain"}))
    assert e.value.field == "spec.task.command.secret_env[K]"
    assert SECRET not in str(e.value)


def test_env_and_secret_env_share_one_byte_budget() -> None:
    half = "x" * (70 << 10)
    with pytest.raises(InvalidArgument) as e:
        validate_spec(spec({"S": half}, env={"E": half}))
    assert e.value.field == "spec.task.command.secret_env"
    assert half not in str(e.value)
