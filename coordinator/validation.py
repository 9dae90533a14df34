"""Server-side validation of what users send: every rule, one place.

Each check raises ``InvalidArgument(field, reason)`` naming the path of the bad
field (``spec.task.command.argv[1]``) so a user can fix it without guessing. The
api calls these before it writes anything, so a rejected call changes nothing.
The bounds are those of ``shardcron.client.limits``: every duration, time, count and
string a user sends is bounded, so no later arithmetic on a stored job can overflow.
What a message echoes of a user's string is clipped (``limits.clip``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from shardcron.client import limits as lim
from shardcron.client.errors import InvalidArgument
from shardcron.client.limits import clip
from shardcron.client.schedule import validate_schedule
from shardcron.client.types import (
    OWNER_HEADER,
    CommandTask,
    HandlerTask,
    JobSpec,
    NotifyPolicy,
    Schedule,
)
from shardcron.coordinator.notify.addresses import MAX_URL, url_parts

_OWNER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")
_LABEL_KEY = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._/-]{{0,{lim.MAX_LABEL_KEY - 1}}}")
_HANDLER = re.compile(rf"[A-Za-z_][A-Za-z0-9_.:-]{{0,{lim.MAX_HANDLER_NAME - 1}}}")
_SHA256 = re.compile(r"[0-9a-f]{64}")  # an artifact's digest, as the blob keys take it


def validate_owner(owner: str) -> str:
    if not _OWNER.fullmatch(owner):
        raise InvalidArgument(OWNER_HEADER, "must be 1-128 letters, digits, '.', '_', '@' or '-'")
    return owner


def text(value: str, field: str, limit: int, *, required: bool = False) -> str:
    """``value`` if it has no NUL and at most ``limit`` characters (and is not empty when
    ``required``)."""
    if required and not value:
        raise InvalidArgument(field, "must not be empty")
    if len(value) > limit:
        raise InvalidArgument(field, f"at most {limit} characters, got {len(value)}")
    if "\0" in value:
        raise InvalidArgument(field, "must not contain a NUL character")
    return value


def identifier(value: str, field: str) -> str:
    """A job, run or worker id a request names: not empty, at most ``MAX_ID`` characters."""
    return text(value, field, lim.MAX_ID, required=True)


def optional_identifier(value: str, field: str) -> str:
    """An id that may be left empty (a filter)."""
    return text(value, field, lim.MAX_ID)


def valid_version(value: int, field: str = "expected_version", *, required: bool = False) -> int:
    """An expected version: 0 = any (unless ``required``), at most ``MAX_VERSION``."""
    if required and value <= 0:
        raise InvalidArgument(field, "required: the version of the job you read")
    if not 0 <= value <= lim.MAX_VERSION:
        raise InvalidArgument(field, f"must be 0 to {lim.MAX_VERSION}")
    return value


def valid_count(value: int, field: str, upper: int, lower: int = 0) -> int:
    if not lower <= value <= upper:
        raise InvalidArgument(field, f"must be {lower} to {upper}")
    return value


def time_bound(value: datetime | None, field: str) -> None:
    """A time a user gives lies in [EARLIEST_TIME, LATEST_TIME)."""
    if value is None:
        return
    if value.utcoffset() is None:
        raise InvalidArgument(field, "must have a time zone")
    if not lim.EARLIEST_TIME <= value < lim.LATEST_TIME:
        raise InvalidArgument(field, "must be from 1970-01-01 to before 9000-01-01 (UTC)")


def duration_bound(value: timedelta | None, field: str, *, positive: bool = False) -> None:
    """A duration lies in [0, MAX_DURATION] (above 0 when ``positive``)."""
    if value is None:
        return
    if positive and value <= timedelta(0):
        raise InvalidArgument(field, "must be positive")
    if value < timedelta(0):
        raise InvalidArgument(field, "must not be negative")
    if value > lim.MAX_DURATION:
        raise InvalidArgument(field, "must be at most 10 years (3653 days)")


def labels(values: Mapping[str, str], field: str) -> None:
    if len(values) > lim.MAX_LABELS:
        raise InvalidArgument(field, f"at most {lim.MAX_LABELS} labels")
    for key, value in values.items():
        path = f"{field}[{clip(key)}]"
        if not _LABEL_KEY.fullmatch(key):
            raise InvalidArgument(
                path,
                f"label keys are 1-{lim.MAX_LABEL_KEY} letters, digits, '.', '_', '/' or '-'",
            )
        text(value, path, lim.MAX_LABEL_VALUE)


def _strings_bytes(values: Iterable[str], field: str, limit: int) -> None:
    size = 0
    for value in values:
        try:
            size += len(value.encode())
        except UnicodeEncodeError:
            raise InvalidArgument(field, "not valid Unicode text") from None
    if size > limit:
        raise InvalidArgument(field, f"at most {limit} bytes in all, got {size}")


def _command(task: CommandTask, path: str) -> None:
    if not task.argv or not task.argv[0]:
        raise InvalidArgument(f"{path}.argv", "must not be empty")
    _strings_bytes(task.argv, f"{path}.argv", lim.MAX_ARGV_BYTES)
    for i, arg in enumerate(task.argv):
        text(arg, f"{path}.argv[{i}]", lim.MAX_ARGV_BYTES)
    # env and secret_env are one environment: one budget, no key in both; what an error
    # says of a secret names its key, never its value
    _strings_bytes([*task.env, *task.env.values()], f"{path}.env", lim.MAX_ENV_BYTES)
    both = (*task.env, *task.env.values(), *task.secret_env, *task.secret_env.values())
    _strings_bytes(both, f"{path}.secret_env", lim.MAX_ENV_BYTES)  # counted with env
    for name, env in (("env", task.env), ("secret_env", task.secret_env)):
        for key, value in env.items():
            if not key or "=" in key or "\0" in key:
                raise InvalidArgument(
                    f"{path}.{name}[{clip(key)}]", "not a valid environment variable name"
                )
            text(value, f"{path}.{name}[{clip(key)}]", lim.MAX_ENV_BYTES)
    for key in task.secret_env.keys() & task.env.keys():
        raise InvalidArgument(f"{path}.secret_env[{clip(key)}]", "also set in env: set it once")
    text(task.cwd, f"{path}.cwd", lim.MAX_CWD)
    if task.cwd and not task.cwd.startswith("/"):
        raise InvalidArgument(f"{path}.cwd", "must be an absolute path")
    if task.artifact and not _SHA256.fullmatch(task.artifact):
        raise InvalidArgument(f"{path}.artifact", "must be a sha256: 64 lowercase hex digits")


def _handler(task: HandlerTask, path: str) -> None:
    if not _HANDLER.fullmatch(task.name):
        raise InvalidArgument(
            f"{path}.name",
            f"must be an identifier such as 'billing.invoice', 1-{lim.MAX_HANDLER_NAME} "
            "letters, digits, '_', '.', ':' or '-'",
        )
    if len(task.payload) > lim.MAX_PAYLOAD:
        raise InvalidArgument(
            f"{path}.payload", f"is {len(task.payload)} bytes; at most {lim.MAX_PAYLOAD}"
        )


def validate_schedule_bounds(s: Schedule, field: str = "schedule") -> None:
    """The schedule's own rules (``validate_schedule``) and the bounds of its times,
    durations and strings."""
    text(s.timezone, f"{field}.timezone", lim.MAX_TIMEZONE)
    text(s.cron or "", f"{field}.cron", lim.MAX_CRON)
    validate_schedule(s, field=field)
    for name in ("at", "anchor", "start_at", "end_at"):
        time_bound(getattr(s, name), f"{field}.{name}")
    if s.interval is not None and not isinstance(s.interval, timedelta):
        raise InvalidArgument(f"{field}.interval", "must be a duration")
    duration_bound(s.interval, f"{field}.interval")
    duration_bound(s.jitter, f"{field}.jitter")


def _retry(spec: JobSpec, field: str) -> None:
    retry = spec.retry
    valid_count(retry.max_attempts, f"{field}.max_attempts", lim.MAX_ATTEMPTS, lower=1)
    duration_bound(retry.initial_backoff, f"{field}.initial_backoff")
    duration_bound(retry.max_backoff, f"{field}.max_backoff")
    if not (isinstance(retry.multiplier, int | float) and math.isfinite(retry.multiplier)):
        raise InvalidArgument(f"{field}.multiplier", "must be a finite number")
    if not 1 <= retry.multiplier <= lim.MAX_MULTIPLIER:
        raise InvalidArgument(f"{field}.multiplier", f"must be 1 to {lim.MAX_MULTIPLIER:g}")
    if not (isinstance(retry.jitter, int | float) and 0 <= retry.jitter <= 1):
        raise InvalidArgument(f"{field}.jitter", "must be between 0 and 1")


def validate_spec(spec: JobSpec, field: str = "spec") -> None:
    """Raises InvalidArgument for the first problem found in ``spec``."""
    text(spec.name, f"{field}.name", lim.MAX_NAME)
    if not spec.name.strip():
        raise InvalidArgument(f"{field}.name", "must not be empty")
    task = spec.task
    if isinstance(task, CommandTask):
        _command(task, f"{field}.task.command")
    elif isinstance(task, HandlerTask):
        _handler(task, f"{field}.task.handler")
    else:
        raise InvalidArgument(f"{field}.task", "must be a command or a handler")
    validate_schedule_bounds(spec.schedule, f"{field}.schedule")
    if abs(spec.priority) > lim.MAX_PRIORITY:
        raise InvalidArgument(f"{field}.priority", f"must be within ±{lim.MAX_PRIORITY}")
    _retry(spec, f"{field}.retry")
    duration_bound(spec.timeout, f"{field}.timeout", positive=True)
    duration_bound(spec.starting_deadline, f"{field}.starting_deadline", positive=True)
    valid_count(
        spec.concurrency.max_concurrent, f"{field}.concurrency.max_concurrent", lim.MAX_CONCURRENT
    )
    res = spec.resources
    valid_count(res.slots, f"{field}.resources.slots", lim.MAX_SLOTS)
    valid_count(res.cpu_millis, f"{field}.resources.cpu_millis", lim.MAX_CPU_MILLIS)
    valid_count(res.memory_mb, f"{field}.resources.memory_mb", lim.MAX_MEMORY_MB)
    valid_count(res.pids_limit, f"{field}.resources.pids_limit", lim.MAX_PIDS_LIMIT)
    valid_count(
        res.output_limit_bytes, f"{field}.resources.output_limit_bytes", lim.MAX_OUTPUT_LIMIT
    )
    for name, most in (
        ("max_files", lim.MAX_RESULT_FILES),
        ("max_file_bytes", lim.MAX_RESULT_FILE_BYTES),
        ("max_bytes", lim.MAX_RESULT_BYTES),
    ):
        valid_count(getattr(res.results, name), f"{field}.resources.results.{name}", most)
    labels(res.labels, f"{field}.resources.labels")
    labels(spec.labels, f"{field}.labels")
    valid_count(
        spec.pause_after_failures, f"{field}.pause_after_failures", lim.MAX_PAUSE_AFTER_FAILURES
    )
    if spec.notify is not None:
        validate_notify(spec.notify, f"{field}.notify")


def validate_notify(n: NotifyPolicy, field: str) -> None:
    """The policy's form; whether the node may call its URL is ``notify.addresses``'s."""
    url_parts(n.webhook_url, f"{field}.webhook_url")
    text(n.webhook_url, f"{field}.webhook_url", MAX_URL)
    valid_count(
        n.on_consecutive_failures, f"{field}.on_consecutive_failures", lim.MAX_PAUSE_AFTER_FAILURES
    )
    duration_bound(n.on_late, f"{field}.on_late", positive=True)
    if not n.rules:
        raise InvalidArgument(field, "names a webhook but no rule: set at least one on_*")


def page_size(value: int, field: str = "page_size") -> int:
    """0 reads as ``DEFAULT_PAGE_SIZE``, more than ``MAX_PAGE_SIZE`` as that."""
    if value < 0:
        raise InvalidArgument(field, "must not be negative")
    return min(value or lim.DEFAULT_PAGE_SIZE, lim.MAX_PAGE_SIZE)


def page_token(value: str, field: str = "page_token") -> str:
    return text(value, field, lim.MAX_PAGE_TOKEN)
