"""shardcron.client.cli without a server: argument parsing, usage errors, option -> JobSpec
mapping, output formats and error exit codes (a fake client stands in for the SDK)."""

from __future__ import annotations

import base64
import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shardcron.client.cli import (
    JobOptions,
    apply_options,
    cli,
    parse_time,
    spec_from_options,
    to_jsonable,
)
from shardcron.client.cli.job_options import notify_rules
from shardcron.client.errors import (
    InvalidArgument,
    NotFound,
    ShardcronError,
    Unavailable,
    VersionConflict,
)
from shardcron.client.types import (
    CommandTask,
    ConcurrencyPolicy,
    DstGap,
    HandlerTask,
    JobSpec,
    MisfirePolicy,
    NotifyPolicy,
    OverlapPolicy,
    Resources,
    ResultLimits,
    RetryPolicy,
    RunState,
    Schedule,
    ScheduleKind,
)
from tests.support.cli import T0, FakeClient, invoke, make_job

# --------------------------------------------------------------------------- help and usage


def test_job_create_help_lists_the_options() -> None:
    result = invoke(["job", "create", "--help"])
    assert result.exit_code == 0
    for option in [
        "--cron", "--tz", "--dst-gap", "--dst-overlap", "--at", "--every", "--anchor",
        "--start-at", "--end-at", "--jitter", "--priority", "--max-attempts", "--backoff",
        "--backoff-multiplier", "--max-backoff", "--timeout", "--max-concurrent", "--overlap",
        "--misfire", "--starting-deadline", "--slots", "--cpu", "--memory", "--require-label",
        "--label", "--pause-after-failures", "--idempotency-key", "--handler", "--payload",
        "--env", "--cwd",
    ]:  # fmt: skip
        assert option in result.stdout, option
    assert "NAME [-- ARGV...]" in result.stdout


def test_top_level_help_lists_the_groups() -> None:
    result = invoke(["--help"])
    assert result.exit_code == 0
    for group in ["job", "run", "dead-letters", "cluster", "--target", "--owner", "--json"]:
        assert group in result.stdout


USAGE_ERRORS = [
    (["job", "create", "n"], "--handler"),
    (["job", "create", "n", "--handler", "h", "--", "/bin/echo"], "--handler"),
    (["job", "create", "n", "--timeout", "5x", "--", "true"], "--timeout"),
    (["job", "create", "n", "--jitter", "-1s", "--", "true"], "--jitter"),
    (["job", "create", "n", "--every", "soon", "--", "true"], "--every"),
    (["job", "create", "n", "--at", "tomorrow", "--", "true"], "--at"),
    (["job", "create", "n", "--at", "now*5", "--", "true"], "--at"),
    (["job", "create", "n", "--label", "team", "--", "true"], "--label"),
    (["job", "create", "n", "--require-label", "=x", "--", "true"], "--require-label"),
    (["job", "create", "n", "--env", "PATH", "--", "true"], "--env"),
    (["job", "create", "n", "--cron", "* * * * *", "--every", "1m", "--", "t"], "--every"),
    (["job", "create", "n", "--at", "now", "--cron", "* * * * *", "--", "t"], "--cron"),
    (["job", "create", "n", "--tz", "Europe/Berlin", "--", "true"], "--tz"),
    (["job", "create", "n", "--every", "1m", "--dst-gap", "skip", "--", "t"], "--dst-gap"),
    (["job", "create", "n", "--anchor", "now", "--", "true"], "--anchor"),
    (["job", "create", "n", "--payload", "x", "--", "true"], "--payload"),
    (["job", "create", "n", "--handler", "h", "--env", "A=1"], "--env"),
    (["job", "create", "n", "--handler", "h", "--payload", "@/no/such/file"], "--payload"),
    (["job", "create", "n", "--misfire", "sometimes", "--", "true"], "--misfire"),
    (["job", "create", "n", "--max-attempts", "0", "--", "true"], "--max-attempts"),
    (["job", "create", "n", "--priority", "high", "--", "true"], "--priority"),
    (["job", "update", "job-1"], "nothing to change"),
    (["job", "preview"], "--cron"),
    (["job", "preview", "job-1", "--every", "5m"], "--every"),
    (["job", "preview", "job-1", "--tz", "UTC"], "schedule options"),
    (["dead-letters", "replay"], "--job"),
    (["dead-letters", "drop", "--job", "j", "run-1"], "--job"),
    (["run", "wait", "r", "--timeout", "forever"], "--timeout"),
    (["--timeout", "0", "job", "get", "j"], "--timeout"),
]


@pytest.mark.parametrize(
    ("args", "named"), USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS]
)
def test_usage_errors_exit_2_naming_the_option(args: list[str], named: str) -> None:
    result = invoke(args)
    assert result.exit_code == 2, result.output
    assert "Error:" in result.stderr
    assert named in result.stderr
    assert "Traceback" not in result.output


# --------------------------------------------------------------------------- options -> spec


def test_spec_from_options_cron_example() -> None:
    spec = spec_from_options(
        JobOptions(
            name="report",
            argv=("/bin/echo", "hi"),
            cron="0 9 * * 1-5",
            tz="Europe/Berlin",
            max_attempts=3,
            timeout=timedelta(seconds=30),
        )
    )
    assert spec == JobSpec(
        name="report",
        task=CommandTask(argv=("/bin/echo", "hi")),
        schedule=Schedule(kind=ScheduleKind.CRON, cron="0 9 * * 1-5", timezone="Europe/Berlin"),
        retry=RetryPolicy(max_attempts=3),
        timeout=timedelta(seconds=30),
    )


def test_job_create_sends_the_exact_spec() -> None:
    fake = FakeClient()
    result = invoke(
        [
            "--target", "10.0.0.1:7400", "--owner", "acme", "--timeout", "5",
            "job", "create", "report",
            "--cron", "0 9 * * 1-5", "--tz", "Europe/Berlin", "--dst-gap", "skip",
            "--start-at", "2026-03-01T09:00:00", "--end-at", "2026-12-31T00:00:00+01:00",
            "--jitter", "30s", "--priority", "5", "--max-attempts", "3", "--backoff", "2s",
            "--backoff-multiplier", "1.5", "--max-backoff", "1m", "--timeout", "30s",
            "--max-concurrent", "2", "--overlap", "forbid", "--misfire", "run-all",
            "--starting-deadline", "5m", "--slots", "2", "--cpu", "500", "--memory", "256",
            "--pids-limit", "64", "--output-limit", "1048576",
            "--result-files", "3", "--result-bytes", "4096",
            "--require-label", "gpu=a100", "--label", "team=data", "--label", "tier=1",
            "--pause-after-failures", "4", "--idempotency-key", "k1",
            "--env", "A=1", "--env", "B=x=y", "--cwd", "/srv",
            "--", "/bin/echo", "-n", "hi",
        ],
        obj=fake,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[:2] == [
        "job        job-1",
        "first run  run-1 (due 2026-03-01 10:00:00 CET)",
    ]
    assert fake.connected == {"target": "10.0.0.1:7400", "owner": "acme", "timeout": 5.0}
    assert fake.closed
    (name, (spec,), kwargs) = fake.calls[0]
    assert (name, kwargs) == ("create_job", {"idempotency_key": "k1"})
    assert spec == JobSpec(
        name="report",
        task=CommandTask(argv=("/bin/echo", "-n", "hi"), env={"A": "1", "B": "x=y"}, cwd="/srv"),
        schedule=Schedule(
            kind=ScheduleKind.CRON,
            cron="0 9 * * 1-5",
            timezone="Europe/Berlin",
            dst_gap=DstGap.SKIP,
            start_at=T0,
            end_at=datetime(2026, 12, 30, 23, 0, tzinfo=UTC),
            jitter=timedelta(seconds=30),
        ),
        priority=5,
        retry=RetryPolicy(
            max_attempts=3,
            initial_backoff=timedelta(seconds=2),
            multiplier=1.5,
            max_backoff=timedelta(minutes=1),
        ),
        timeout=timedelta(seconds=30),
        concurrency=ConcurrencyPolicy(max_concurrent=2, overlap=OverlapPolicy.FORBID),
        misfire=MisfirePolicy.RUN_ALL,
        starting_deadline=timedelta(minutes=5),
        resources=Resources(
            slots=2,
            cpu_millis=500,
            memory_mb=256,
            labels={"gpu": "a100"},
            pids_limit=64,
            output_limit_bytes=1 << 20,
            results=ResultLimits(max_files=3, max_bytes=4096),
        ),
        pause_after_failures=4,
        labels={"team": "data", "tier": "1"},
    )


def test_job_create_handler_with_file_payload(tmp_path: Any) -> None:
    payload = tmp_path / "payload.bin"
    payload.write_bytes(b"\x00\x01{}")
    fake = FakeClient()
    result = invoke(
        [
            "job",
            "create",
            "resize",
            "--every",
            "90s",
            "--handler",
            "img.resize",
            "--payload",
            f"@{payload}",
        ],
        obj=fake,
    )
    assert result.exit_code == 0, result.output
    spec = fake.calls[0][1][0]
    assert spec.task == HandlerTask(name="img.resize", payload=b"\x00\x01{}")
    assert spec.schedule == Schedule.every(timedelta(seconds=90))


def test_no_schedule_option_is_immediate_and_relative_times_work() -> None:
    assert spec_from_options(JobOptions(name="n", argv=("true",))).schedule == Schedule.immediate()
    before = datetime.now(UTC)
    fake = FakeClient()
    assert invoke(["job", "create", "n", "--at", "now+30s", "--", "true"], obj=fake).exit_code == 0
    at = fake.calls[0][1][0].schedule.at
    assert before + timedelta(seconds=30) <= at <= datetime.now(UTC) + timedelta(seconds=30)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-01T09:00:00", T0),
        ("2026-03-01 09:00", T0),
        ("2026-03-01T10:00:00+01:00", T0),
        ("2026-03-01T09:00:00Z", T0),
        ("now", T0),
        ("now+30s", T0 + timedelta(seconds=30)),
        ("NOW - 1h30m", T0 - timedelta(hours=1, minutes=30)),
    ],
)
def test_parse_time(text: str, expected: datetime) -> None:
    parsed = parse_time(text, now=T0)
    assert parsed == expected
    assert parsed.tzinfo is UTC


@pytest.mark.parametrize("text", ["", "tomorrow", "now+", "now+5x", "now 5m", "2026-13-01"])
def test_parse_time_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_time(text, now=T0)


def test_apply_options_changes_only_what_is_given() -> None:
    current = FakeClient().current.spec
    changed = apply_options(current, JobOptions(timeout=timedelta(minutes=1), labels=(("a", "b"),)))
    assert changed == current.replace(timeout=timedelta(minutes=1), labels={"a": "b"})
    assert apply_options(changed, JobOptions(timeout=timedelta(0))).timeout is None  # 0 = none


def test_apply_options_schedule_changes() -> None:
    current = FakeClient().current.spec
    tz_only = apply_options(current, JobOptions(tz="Asia/Tokyo"))
    assert tz_only.schedule == Schedule.cron_expr("0 9 * * *", "Asia/Tokyo")
    every = apply_options(current, JobOptions(every=timedelta(minutes=5)))
    assert every.schedule == Schedule.every(timedelta(minutes=5))
    new_argv = apply_options(current, JobOptions(argv=("/bin/false",)))
    assert new_argv.task == CommandTask(argv=("/bin/false",), env={"A": "1"})
    handler = apply_options(current, JobOptions(handler="h", payload=b"p"))
    assert handler.task == HandlerTask(name="h", payload=b"p")


def test_job_update_reads_then_sends_with_the_read_version() -> None:
    fake = FakeClient()
    result = invoke(["--json", "job", "update", "job-1", "--max-attempts", "2"], obj=fake)
    assert result.exit_code == 0, result.output
    (_, (job_id,), _), (name, (uid, spec), kwargs) = fake.calls
    assert (job_id, name, uid, kwargs) == ("job-1", "update_job", "job-1", {"expected_version": 7})
    assert spec == fake.current.spec.replace(retry=RetryPolicy(max_attempts=2))
    assert json.loads(result.stdout)["version"] == 8


def test_job_update_expected_version_overrides() -> None:
    fake = FakeClient()
    result = invoke(
        ["job", "update", "job-1", "--name", "new", "--expected-version", "3"], obj=fake
    )
    assert result.exit_code == 0, result.output
    assert fake.calls[-1][2] == {"expected_version": 3}
    assert fake.calls[-1][1][1].name == "new"


# --------------------------------------------------------------------------- output


def test_json_output_is_one_document() -> None:
    fake = FakeClient()
    result = invoke(
        ["--json", "job", "create", "n", "--every", "1m30s", "--handler", "h", "--payload", "hi"],
        obj=fake,
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["id"] == "job-1"
    assert doc["state"] == "ACTIVE"
    assert doc["created_at"] == "2026-03-01T09:00:00+00:00"
    assert doc["spec"]["schedule"]["interval"] == 90.0
    assert doc["spec"]["schedule"]["kind"] == "INTERVAL"
    assert doc["spec"]["task"] == {"name": "h", "payload": base64.b64encode(b"hi").decode()}
    assert doc["next_fire_at"] is None


def test_to_jsonable() -> None:
    value = {
        "t": T0,
        "d": timedelta(milliseconds=1500),
        "b": b"\xff",
        "e": RunState.FAILED,
        "l": (1,),
    }
    assert to_jsonable(value) == {
        "t": "2026-03-01T09:00:00+00:00",
        "d": 1.5,
        "b": "/w==",
        "e": "FAILED",
        "l": [1],
    }


def test_job_get_prints_aligned_fields() -> None:
    result = invoke(["job", "get", "job-1"], obj=FakeClient())
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["id", "job-1"]
    assert "schedule" in result.stdout and "cron '0 9 * * *' Europe/Berlin" in result.stdout
    assert "retry" in result.stdout and "4 attempts" in result.stdout
    value_columns = {len(line) - len(line.split("  ", 1)[1].lstrip()) for line in lines}
    assert len(value_columns) == 1  # every value starts in the same column


def test_cli_can_be_extended_and_maps_errors_of_added_commands() -> None:
    import click

    from shardcron.client.cli import CliState

    @click.command("probe")
    @click.pass_context
    def probe(ctx: click.Context) -> None:
        state = ctx.find_object(CliState)
        assert state is not None and state.target == "h:1"
        raise NotFound("nothing here")

    cli.add_command(probe)
    try:
        result = invoke(["--target", "h:1", "probe"])
    finally:
        del cli.commands["probe"]
    assert result.exit_code == 3
    assert result.stderr == "error: NOT_FOUND: nothing here\n"


def test_run_logs_writes_raw_bytes() -> None:
    fake = FakeClient()
    result = invoke(["run", "logs", "run-1", "-f", "--offset", "-100"], obj=fake)
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == b"hello \xffworld\n"
    assert fake.calls == [
        ("get_run", ("run-1",), {}),
        ("read_output", ("run-1",), {"offset": -100, "follow": True, "limit": 0}),
    ]


@pytest.mark.parametrize(
    ("args", "offset", "limit"),
    [
        (["--head", "10"], 0, 10),
        (["--tail", "10"], -10, 0),
        (["--bytes", "5-9"], 5, 5),
        (["--bytes", "7-7"], 7, 1),
    ],
)
def test_run_logs_ranges_become_offset_and_limit(args: list[str], offset: int, limit: int) -> None:
    fake = FakeClient()
    result = invoke(["run", "logs", "run-1", *args], obj=fake)
    assert result.exit_code == 0, result.output
    assert fake.calls[-1] == (
        "read_output",
        ("run-1",),
        {"offset": offset, "follow": False, "limit": limit},
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--bytes", "9-5"], "B must be in [A,"),
        (["--bytes", "x-5"], "is not A-B"),
        (["--head", "5", "--tail", "5"], "--head and --tail: give one of them"),
        (["--head", "5", "-f"], "not with --head or --bytes"),
    ],
)
def test_run_logs_bad_ranges_are_refused(args: list[str], says: str) -> None:
    result = invoke(["run", "logs", "run-1", *args], obj=FakeClient())
    assert result.exit_code == 2
    assert says in result.output


@pytest.mark.parametrize(("state", "code"), [(RunState.SUCCEEDED, 0), (RunState.FAILED, 1)])
def test_run_wait_exit_code(state: RunState, code: int) -> None:
    fake = FakeClient(run_state=state)
    result = invoke(["run", "wait", "run-1", "--timeout", "1m"], obj=fake)
    assert result.exit_code == code
    assert result.stdout == f"run-1 {state.value}\n"
    assert fake.calls[0] == ("get_run", ("run-1",), {})
    name, args, kwargs = fake.calls[1]
    assert (name, args) == ("wait_run", ("run-1",)) and 59 < kwargs["timeout"] <= 60


# --------------------------------------------------------------------------- server errors


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (
            InvalidArgument("spec.schedule.cron", "must have 5 fields"),
            2,
            "error: INVALID_ARGUMENT: spec.schedule.cron: must have 5 fields",
        ),
        (NotFound("job job-1"), 3, "error: NOT_FOUND: job job-1"),
        (VersionConflict("job is at version 8"), 4, "error: ABORTED: job is at version 8"),
        (Unavailable("failed to connect"), 1, "error: UNAVAILABLE: failed to connect"),
    ],
)
def test_server_errors_print_one_line_and_exit_code(
    error: ShardcronError, code: int, line: str
) -> None:
    result = invoke(["job", "get", "job-1"], obj=FakeClient(error=error))
    assert result.exit_code == code
    assert result.stderr == line + "\n"
    assert result.stdout == ""
    assert result.exception is None or isinstance(result.exception, SystemExit)


# --------------------------------------------------------------------------- secret env


def test_secret_env_from_flags_and_files_is_sent_and_never_echoed(tmp_path: Any) -> None:
    env_file = tmp_path / "backup.env"
    env_file.write_text("# comment\n\nDB_PASSWORD=from-file\nAPI_KEY=k=v\n")
    fake = FakeClient()
    args = ["job", "create", "b", "--secret-env-file", str(env_file)]
    result = invoke([*args, "--secret-env", "DB_PASSWORD=from-flag", "--", "true"], obj=fake)
    assert result.exit_code == 0, result.output
    [spec] = [args[0] for name, args, _ in fake.calls if name == "create_job"]
    assert spec.task.secret_env == {"DB_PASSWORD": "from-flag", "API_KEY": "k=v"}  # flags win

    bad = invoke(["job", "create", "b", "--secret-env", "hunter2", "--", "true"])
    assert bad.exit_code == 2 and "hunter2" not in bad.output
    env_file.write_text("DB_PASSWORD=ok\nhunter2\n")
    bad = invoke(["job", "create", "b", "--secret-env-file", str(env_file), "--", "true"])
    assert bad.exit_code == 2 and "backup.env:2" in bad.output and "hunter2" not in bad.output
    bad = invoke(["job", "create", "b", "--handler", "h", "--secret-env", "K=v"])
    assert bad.exit_code == 2 and "--secret-env" in bad.output


def test_job_update_sends_back_the_placeholders_it_read_with_the_keys_given() -> None:
    fake = FakeClient()
    task = CommandTask(argv=("/bin/true",), secret_env={"KEEP": "***", "DROP": "***"})
    fake.current = make_job(JobSpec(name="old", task=task), version=7)
    result = invoke(
        ["job", "update", "job-1", "--secret-env", "NEW=n", "--secret-env", "DROP="], obj=fake
    )
    assert result.exit_code == 0, result.output
    sent = fake.calls[-1][1][1].task.secret_env
    assert sent == {"KEEP": "***", "DROP": "", "NEW": "n"}
    untouched = invoke(["job", "update", "job-1", "--name", "n2"], obj=fake)
    assert untouched.exit_code == 0 and fake.calls[-1][1][1].task.secret_env == task.secret_env


def test_job_get_shows_secret_keys_never_values() -> None:
    fake = FakeClient()
    task = CommandTask(argv=("/bin/true",), secret_env={"DB_PASSWORD": "***"})
    fake.current = make_job(JobSpec(name="old", task=task))
    result = invoke(["job", "get", "job-1"], obj=fake)
    assert result.exit_code == 0, result.output
    assert "DB_PASSWORD=***" in result.output


def test_notify_flags_make_the_policy_and_an_update_keeps_or_replaces_it() -> None:
    fake = FakeClient()
    result = invoke(
        [
            "job", "create", "n", "--notify-webhook", "https://h.example/x",
            "--notify-on", "failure,recovery,dead-letter,consecutive=3,late=30s,missed",
            "--notify-slack", "--", "true",
        ],
        obj=fake,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (_, (spec,), _) = fake.calls[0]
    assert spec.notify == NotifyPolicy(
        webhook_url="https://h.example/x", on_failure=True, on_recovery=True,
        on_dead_letter=True, on_consecutive_failures=3, on_late=timedelta(seconds=30),
        on_missed=True, slack=True,
    )  # fmt: skip
    kept = apply_options(spec, JobOptions(notify_webhook="https://h.example/y"))
    assert kept.notify == dataclasses.replace(spec.notify, webhook_url="https://h.example/y")
    only = apply_options(spec, JobOptions(notify_on=notify_rules("failure")))
    assert only.notify is not None and only.notify.rules == ("failure",)
    assert apply_options(spec, JobOptions(notify_webhook="")).notify is None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--notify-webhook", "https://h/x"], "--notify-webhook needs --notify-on"),
        (["--notify-on", "failure"], "need --notify-webhook"),
        (["--notify-webhook", "https://h/x", "--notify-on", "sometimes"], "unknown rule"),
        (["--notify-webhook", "https://h/x", "--notify-on", "consecutive=0"], "unknown rule"),
        (["--notify-webhook", "https://h/x", "--notify-on", "late=soon"], "late=soon"),
    ],
)
def test_bad_notify_flags_are_usage_errors(args: list[str], says: str) -> None:
    result = invoke(["job", "create", "n", *args, "--", "true"], obj=FakeClient())
    assert result.exit_code == 2 and says in result.output, result.output
