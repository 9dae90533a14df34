"""The command line's value types: times, durations, ``KEY=VALUE`` pairs, payloads and enums.

Each click parameter type turns one flag's text into the domain value, or fails with a
usage error naming the flag; ``usage_error`` is the error for rules that span several
flags. Nothing here knows about jobs or the server.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

import click

from shardcron.client.limits import MAX_DURATION, MAX_OUTPUT_OFFSET
from shardcron.client.schedule import format_duration, parse_duration


def parse_time(text: str, *, now: datetime | None = None) -> datetime:
    """An aware UTC datetime from ISO 8601 (naive = UTC), ``now``, or ``now+30s``/``now-5m``."""
    t = text.strip()
    if t.lower().startswith("now"):
        base = now or datetime.now(UTC)
        rest = t[3:].strip()
        if not rest:
            return base
        if rest[0] not in "+-":
            raise ValueError(f"invalid time {text!r}: expected now+DURATION or now-DURATION")
        delta = parse_duration(rest[1:])
        return base + delta if rest[0] == "+" else base - delta
    try:
        dt = datetime.fromisoformat(t)
    except ValueError:
        raise ValueError(
            f"invalid time {text!r} (try 2026-03-01T09:00:00+01:00, 2026-03-01T08:00 for UTC, "
            "or now+30s)"
        ) from None
    return dt.replace(tzinfo=UTC) if dt.utcoffset() is None else dt.astimezone(UTC)


class DurationParam(click.ParamType):
    """``500ms``, ``30s``, ``5m``, ``1h30m``, ``2d``; a plain number is seconds. At most
    ``limits.MAX_DURATION`` (ten years), the longest duration the server takes."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, timedelta):
            return value
        try:
            duration = parse_duration(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)
        if duration > MAX_DURATION:
            self.fail(
                f"at most {format_duration(MAX_DURATION)} (10 years): {value!r:.40}", param, ctx
            )
        return duration


class ByteRangeParam(click.ParamType):
    """``A-B``: bytes A to B of an output, both included (as HTTP ranges count them)."""

    name = "A-B"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        first, sep, last = str(value).partition("-")
        if not sep or not first.isdigit() or not last.isdigit():
            self.fail(f"{value!r:.40} is not A-B (two byte offsets, e.g. 0-1023)", param, ctx)
        start, end = int(first), int(last)
        if end < start or end > MAX_OUTPUT_OFFSET:
            self.fail(f"{value!r:.40}: B must be in [A, {MAX_OUTPUT_OFFSET}]", param, ctx)
        return start, end


class TimeParam(click.ParamType):
    """See ``parse_time``."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        try:
            return parse_time(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


class KeyValueParam(click.ParamType):
    """``KEY=VALUE`` -> ``(KEY, VALUE)``; the key must not be empty. A ``secret`` one never
    echoes what it was given (it may be the value alone)."""

    name = "key=value"

    def __init__(self, *, secret: bool = False) -> None:
        self.secret = secret

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        key, sep, val = value.partition("=")
        if not sep or not key.strip():
            got = "" if self.secret else f", got {value!r}"
            self.fail(f"expected KEY=VALUE{got}", param, ctx)
        return key.strip(), val


class EnvFileParam(click.ParamType):
    """A file of ``KEY=VALUE`` lines (blank lines and ``#`` comments skipped) -> a tuple
    of ``(KEY, VALUE)``. Errors name the line, never its text: the values are secrets."""

    name = "file"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        try:
            with open(value, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError) as e:
            self.fail(f"cannot read {value!r}: {getattr(e, 'strerror', None) or e}", param, ctx)
        pairs = []
        for number, line in enumerate(lines, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            key, sep, val = line.partition("=")
            if not sep or not key.strip():
                self.fail(f"{value}:{number}: expected KEY=VALUE", param, ctx)
            pairs.append((key.strip(), val))
        return tuple(pairs)


class PayloadParam(click.ParamType):
    """Text (sent as UTF-8), or ``@FILE`` for the bytes of a file."""

    name = "text|@file"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, bytes):
            return value
        if not value.startswith("@"):
            return value.encode()
        try:
            with open(value[1:], "rb") as f:
                return f.read()
        except OSError as e:
            self.fail(f"cannot read {value[1:]!r}: {e.strerror}", param, ctx)


class EnumChoice(click.Choice):
    """A choice among an enum's values, written lower-case with hyphens (``run-once``)."""

    def __init__(self, enum_cls: type[Enum]) -> None:
        self.enum_cls = enum_cls
        super().__init__(
            [m.value.lower().replace("_", "-") for m in enum_cls if m.value], case_sensitive=False
        )

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, self.enum_cls):
            return value
        choice = super().convert(value, param, ctx)
        return self.enum_cls(str(choice).upper().replace("-", "_"))


DURATION = DurationParam()
TIME = TimeParam()
BYTE_RANGE = ByteRangeParam()
KEY_VALUE = KeyValueParam()
SECRET_KEY_VALUE = KeyValueParam(secret=True)
ENV_FILE = EnvFileParam()
PAYLOAD = PayloadParam()


def usage_error(message: str) -> click.UsageError:
    """A usage error for a rule no single flag's type can check (exit 2, with the usage)."""
    return click.UsageError(message, ctx=click.get_current_context(silent=True))
