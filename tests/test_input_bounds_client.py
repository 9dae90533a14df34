"""Bad input the SDK and the CLI refuse before sending anything, errors capped whatever
they echo, and the domain arithmetic the bounds protect (no server is needed)."""

from __future__ import annotations

from datetime import timedelta

import grpc
import pytest
from click.testing import CliRunner

from shardcron.client import codec, limits
from shardcron.client.cli import cli
from shardcron.client.errors import InvalidArgument, NotFound
from shardcron.client.sdk import Client
from shardcron.client.types import CommandTask, JobSpec, RetryPolicy, RunReason, Schedule
from shardcron.v1 import types_pb2


def test_error_messages_are_capped_whatever_they_echo() -> None:
    code, message = codec.status_for(NotFound(f"job {'é' * 100_000} not found"))
    assert code == grpc.StatusCode.NOT_FOUND
    assert len(message) <= limits.MAX_ERROR_MESSAGE + 20
    assert message.endswith("chars)")
    code, message = codec.status_for(KeyError("k" * 100_000))
    assert code == grpc.StatusCode.INTERNAL
    assert len(message) <= limits.MAX_ERROR_MESSAGE + 20


# --------------------------------------------------------------------------- SDK and CLI


def test_the_sdk_raises_invalid_argument_for_a_priority_protobuf_cannot_hold() -> None:
    with Client("127.0.0.1:1", timeout=1) as c:
        with pytest.raises(InvalidArgument) as e:
            c.create_job(JobSpec(name="n", task=CommandTask(argv=("true",)), priority=1 << 40))
        assert e.value.field == "spec.priority"
        with pytest.raises(InvalidArgument) as e:
            c.create_job(JobSpec(name="\ud800", task=CommandTask(argv=("true",))))
        assert e.value.field == "spec.name"
        with pytest.raises(InvalidArgument) as e:
            c.create_job(JobSpec(name="n", task=CommandTask(argv=("true",)), timeout=timedelta.max))
        assert e.value.field == "spec.timeout"
        with pytest.raises(InvalidArgument) as e:
            c.update_job(
                "j", JobSpec(name="n", task=CommandTask(argv=("t",))), expected_version=2**64
            )
        assert e.value.field == "expected_version"
        with pytest.raises(InvalidArgument) as e:
            c.list_jobs(page_size=1 << 40)
        assert e.value.field == "page_size"
        with pytest.raises(InvalidArgument) as e:
            c.preview_fires(Schedule.every(timedelta(minutes=1)), count=1 << 40)
        assert e.value.field == "count"


@pytest.mark.parametrize(
    "flags",
    [
        ["--priority", "1099511627776"],
        ["--max-attempts", "1099511627776"],
        ["--slots", "1099511627776"],
        ["--cpu", "1099511627776"],
        ["--memory", "1099511627776"],
        ["--max-concurrent", "1099511627776"],
        ["--pause-after-failures", "1099511627776"],
        ["--backoff-multiplier", "1e300"],
        ["--timeout", "99999999d"],
    ],
)
def test_the_cli_prints_an_error_not_a_traceback_for_an_out_of_range_number(
    flags: list[str],
) -> None:
    result = CliRunner().invoke(cli, ["job", "create", "n", *flags, "--", "true"], obj=_no_server)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert flags[0] in result.output
    assert "Traceback" not in result.output


def _no_server(*args: object, **kwargs: object) -> object:
    pytest.fail("an out-of-range flag must not reach the server")


def test_the_cli_turns_an_sdk_invalid_argument_into_an_error_line() -> None:
    """A number a flag lets through but protobuf cannot hold ends as one error line, before
    anything is sent (nothing listens on the target)."""
    result = CliRunner().invoke(
        cli, ["--target", "127.0.0.1:1", "dead-letters", "list", "--limit", str(1 << 40)]
    )
    assert result.exit_code == 2, result.output
    assert (
        result.output.strip()
        == "error: INVALID_ARGUMENT: page_size: cannot be sent: Value out of range"
    )


# --------------------------------------------------------------------------- domain


def test_the_backoff_of_a_late_attempt_is_max_backoff_not_an_overflow() -> None:
    """Attempt 60 of a default policy (multiplier 2) overflowed timedelta: 2**59 seconds."""
    policy = RetryPolicy(max_attempts=limits.MAX_ATTEMPTS)
    assert policy.backoff(60) == policy.max_backoff
    assert RetryPolicy(multiplier=limits.MAX_MULTIPLIER).backoff(5000) == policy.max_backoff
    assert RetryPolicy(initial_backoff=timedelta(0)).backoff(5000) == timedelta(0)
    assert policy.backoff(2) == timedelta(seconds=2)


def test_run_reason_internal_error_maps_both_ways() -> None:
    number = codec.run_reason_to_proto(RunReason.INTERNAL_ERROR)
    assert number == types_pb2.RUN_REASON_INTERNAL_ERROR
    assert codec.run_reason_from_proto(number) is RunReason.INTERNAL_ERROR
