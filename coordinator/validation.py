"""Server-side validation of what users send: every rule, one place.

Each check raises ``InvalidArgument(field, reason)`` naming the path of the bad
field (``spec.task.command.argv``) so a user can fix it without guessing. The
api calls these before it writes anything, so a rejected call changes nothing.
"""

from __future__ import annotations

import re
from datetime import timedelta

from shardcron.client.errors import InvalidArgument
from shardcron.client.schedule import validate_schedule
from shardcron.client.types import CommandTask, HandlerTask, JobSpec

MAX_NAME = 200
MAX_PAYLOAD = 1 << 20  # handler payload bytes
MAX_ARGV_BYTES = 128 << 10
MAX_ATTEMPTS = 100
MAX_PRIORITY = 1_000_000
MAX_LABELS = 64
_OWNER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
_LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
_HANDLER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,199}$")


def validate_owner(owner: str) -> str:
    if not _OWNER.match(owner):
        raise InvalidArgument(
            "x-shardcron-owner", "must be 1-128 letters, digits, '.', '_', '@' or '-'"
        )
    return owner


def _non_negative(value: timedelta | None, field: str) -> None:
    if value is not None and value < timedelta(0):
        raise InvalidArgument(field, "must not be negative")


def _labels(labels: dict[str, str], field: str) -> None:
    if len(labels) > MAX_LABELS:
        raise InvalidArgument(field, f"at most {MAX_LABELS} labels")
    for key, value in labels.items():
        if not _LABEL_KEY.match(key):
            raise InvalidArgument(
                f"{field}[{key}]", "label keys are 1-63 letters, digits, '.', '_', '/' or '-'"
            )
        if len(value) > 256:
            raise InvalidArgument(f"{field}[{key}]", "label values are at most 256 characters")


def validate_spec(spec: JobSpec, field: str = "spec") -> None:
    """Raises InvalidArgument for the first problem found in ``spec``."""
    if not spec.name.strip():
        raise InvalidArgument(f"{field}.name", "must not be empty")
    if len(spec.name) > MAX_NAME:
        raise InvalidArgument(f"{field}.name", f"at most {MAX_NAME} characters")
    task = spec.task
    if isinstance(task, CommandTask):
        path = f"{field}.task.command"
        if not task.argv or not task.argv[0]:
            raise InvalidArgument(f"{path}.argv", "must not be empty")
        if sum(len(a.encode()) for a in task.argv) > MAX_ARGV_BYTES:
            raise InvalidArgument(f"{path}.argv", f"at most {MAX_ARGV_BYTES} bytes")
        for key in task.env:
            if not key or "=" in key or "\0" in key:
                raise InvalidArgument(f"{path}.env[{key}]", "not a valid environment variable name")
        if task.cwd and not task.cwd.startswith("/"):
            raise InvalidArgument(f"{path}.cwd", "must be an absolute path")
    elif isinstance(task, HandlerTask):
        path = f"{field}.task.handler"
        if not _HANDLER.match(task.name):
            raise InvalidArgument(f"{path}.name", "must be an identifier such as 'billing.invoice'")
        if len(task.payload) > MAX_PAYLOAD:
            raise InvalidArgument(
                f"{path}.payload", f"is {len(task.payload)} bytes; at most {MAX_PAYLOAD}"
            )
    else:
        raise InvalidArgument(f"{field}.task", "must be a command or a handler")
    validate_schedule(spec.schedule, field=f"{field}.schedule")
    if abs(spec.priority) > MAX_PRIORITY:
        raise InvalidArgument(f"{field}.priority", f"must be within ±{MAX_PRIORITY}")
    retry = spec.retry
    if not 0 <= retry.max_attempts <= MAX_ATTEMPTS:
        raise InvalidArgument(f"{field}.retry.max_attempts", f"must be 0 to {MAX_ATTEMPTS}")
    _non_negative(retry.initial_backoff, f"{field}.retry.initial_backoff")
    _non_negative(retry.max_backoff, f"{field}.retry.max_backoff")
    if retry.multiplier < 1:
        raise InvalidArgument(f"{field}.retry.multiplier", "must be at least 1")
    if not 0 <= retry.jitter <= 1:
        raise InvalidArgument(f"{field}.retry.jitter", "must be between 0 and 1")
    if spec.timeout is not None and spec.timeout <= timedelta(0):
        raise InvalidArgument(f"{field}.timeout", "must be positive")
    if spec.starting_deadline is not None and spec.starting_deadline <= timedelta(0):
        raise InvalidArgument(f"{field}.starting_deadline", "must be positive")
    if spec.concurrency.max_concurrent < 0:
        raise InvalidArgument(f"{field}.concurrency.max_concurrent", "must not be negative")
    res = spec.resources
    for name in ("slots", "cpu_millis", "memory_mb"):
        if getattr(res, name) < 0:
            raise InvalidArgument(f"{field}.resources.{name}", "must not be negative")
    _labels(res.labels, f"{field}.resources.labels")
    _labels(spec.labels, f"{field}.labels")
    if spec.pause_after_failures < 0:
        raise InvalidArgument(f"{field}.pause_after_failures", "must not be negative")


def page_size(value: int, field: str = "page_size") -> int:
    if value < 0:
        raise InvalidArgument(field, "must not be negative")
    return min(value or 100, 1000)
