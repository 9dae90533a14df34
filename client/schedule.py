"""Schedule maths: when a ``Schedule`` fires, as UTC instants, across time zones and DST.

Cron expressions are read as nominal local wall times (croniter on naive datetimes, so it
never sees DST) and then mapped to instants with zoneinfo, where ``dst_gap`` and
``dst_overlap`` decide the odd days. Also here: validation, interval and one-off fires,
fire keys, stable jitter and duration text. Pure functions, no I/O, no clock except in
``validate_schedule``'s "never fires" check.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import re
from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from itertools import islice
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

from shardcron.client.errors import InvalidArgument
from shardcron.client.limits import LATEST_TIME, MIN_INTERVAL
from shardcron.client.types import DstGap, DstOverlap, Fire, RunReason, Schedule, ScheduleKind

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NEVER_FIRES_YEARS = 5  # a cron must fire within this many years to be valid
_SECOND = timedelta(seconds=1)
_EARLIEST = datetime(1, 1, 3, tzinfo=UTC)  # cron iteration starts no earlier (date range)
_FALLBACK_PROBE_HOURS = 27  # look this far ahead for a fall-back that repeats wall times

# --------------------------------------------------------------------------- validation


def validate_schedule(s: Schedule, *, field: str = "schedule") -> None:
    """Raise ``InvalidArgument(f"{field}.<name>", reason)`` for the first problem of ``s``."""

    def bad(name: str, reason: str) -> InvalidArgument:
        return InvalidArgument(f"{field}.{name}", reason)

    try:
        kind = ScheduleKind(s.kind)
    except ValueError:
        raise bad("kind", f"unknown schedule kind {s.kind!r}") from None
    for name in ("at", "anchor", "start_at", "end_at"):
        value = getattr(s, name)
        if value is not None and not isinstance(value, datetime):
            raise bad(name, "must be a datetime")
        if value is not None and value.utcoffset() is None:
            raise bad(name, "must have a time zone")
    tz = _zone_or_none(s.timezone)
    if tz is None:
        raise bad("timezone", f"unknown time zone {s.timezone!r}")
    if kind is ScheduleKind.AT and s.at is None:
        raise bad("at", "required for an AT schedule")
    if kind is ScheduleKind.CRON:
        problem = _cron_problem(s.cron, tz)
        if problem:
            raise bad("cron", problem)
    if kind is ScheduleKind.INTERVAL:
        if not isinstance(s.interval, timedelta):
            raise bad("interval", "required for an INTERVAL schedule")
        if s.interval < MIN_INTERVAL:
            raise bad("interval", "must be at least 1s")
    if not isinstance(s.jitter, timedelta):
        raise bad("jitter", "must be a duration")
    if s.jitter < timedelta(0):
        raise bad("jitter", "must not be negative")
    if s.start_at is not None and s.end_at is not None and s.end_at <= s.start_at:
        raise bad("end_at", "must be after start_at")


def _zone_or_none(name: object) -> ZoneInfo | None:
    try:
        return ZoneInfo(name)  # type: ignore[arg-type]
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        return None


def _cron_problem(expr: object, tz: ZoneInfo) -> str:
    """Why ``expr`` is not a usable cron expression, or "" if it is."""
    if not isinstance(expr, str) or not expr.strip():
        return "required for a CRON schedule"
    fields = expr.split()
    if len(fields) not in (5, 6):
        return "must have 5 fields, or 6 with seconds last"
    if any(f.lower().startswith(("h", "r")) for f in fields):
        return "hashed or random fields (H, R) are not supported"
    misplaced = _seconds_written_first(fields)
    if misplaced:
        return misplaced
    now = datetime.now(tz).replace(tzinfo=None)
    try:
        croniter(expr, now, max_years_between_matches=NEVER_FIRES_YEARS).get_next(datetime)
    except CroniterBadDateError:
        return "never fires"
    except (ValueError, TypeError, KeyError, IndexError, OverflowError):
        if len(fields) == 6:
            return "not a valid cron expression (of 6 fields, the seconds come last)"
        return "not a valid cron expression"
    return ""


def _seconds_written_first(fields: list[str]) -> str:
    """Why 6 ``fields`` look like seconds written first (as in Quartz), or "".

    Seconds come last here, so ``*/5 * * * * *`` would fire every second of every 5th
    minute: a seconds field of ``*`` under a minute field that is not is what seconds
    written first produce, and is refused rather than silently read the other way.
    Every second of some minutes is still possible, written ``0-59``.
    """
    if len(fields) != 6 or fields[5] != "*" or fields[0] == "*":
        return ""
    moved = " ".join([*fields[1:], fields[0]])
    return (
        f"the seconds field comes last: {' '.join(fields)!r} would fire every second of "
        f"minutes {fields[0]!r}; for seconds {fields[0]!r} write {moved!r} (or seconds "
        "0-59 to mean every second)"
    )


# --------------------------------------------------------------------------- fires


def iter_fires(s: Schedule, after: datetime) -> Iterator[Fire]:
    """Fires of ``s`` strictly after ``after``, in increasing order of instant.

    Honours ``start_at`` (no fire before it) and ``end_at`` (none after it); infinite for
    CRON and INTERVAL without ``end_at`` but for ``limits.LATEST_TIME``: no fire lies at or
    after it, so adding a jitter or a deadline to a fire cannot overflow. Raises ValueError for IMMEDIATE schedules.
    """
    if s.kind == ScheduleKind.IMMEDIATE:
        raise ValueError("an IMMEDIATE schedule has no fires")
    after = _utc(after, "after")
    start = None if s.start_at is None else _utc(s.start_at, "start_at")
    end = None if s.end_at is None else _utc(s.end_at, "end_at")
    tz = ZoneInfo(s.timezone)
    lo = after if start is None else max(after, start)
    if s.kind == ScheduleKind.AT:
        if s.at is None:
            raise ValueError("an AT schedule needs at")
        at = _utc(s.at, "at")
        raw: Iterator[Fire] = iter([Fire(key=at.isoformat(), at=at, local=at.astimezone(tz))])
    elif s.kind == ScheduleKind.INTERVAL:
        if s.interval is None or s.interval <= timedelta(0):
            raise ValueError("an INTERVAL schedule needs a positive interval")
        raw = _interval_fires(s, tz, lo)
    elif s.kind == ScheduleKind.CRON:
        if not s.cron or len(s.cron.split()) not in (5, 6):
            raise ValueError(f"cron needs 5 fields, or 6 with seconds last: {s.cron!r}")
        raw = _cron_fires(s, tz, lo)
    else:
        raise ValueError(f"unknown schedule kind {s.kind!r}")
    return _window(raw, after, start, end)


@functools.lru_cache(maxsize=4096)
def next_fire(s: Schedule, after: datetime) -> Fire | None:
    """The first fire of ``s`` after ``after``. Remembered: a fleet of jobs on one cron
    expression comes due at one instant, and each asks for the same next fire (croniter
    takes about 160 us to find it; schedules and fires are frozen values)."""
    return next(iter_fires(s, after), None)


def preview(s: Schedule, after: datetime, count: int) -> list[Fire]:
    return list(islice(iter_fires(s, after), max(0, count)))


def fire_key(local: datetime) -> str:
    """Key of a cron fire: the nominal local wall time and its fold, tzinfo dropped.

    ``fire_key(datetime(2026, 10, 25, 2, 30, fold=1))`` is ``"2026-10-25T02:30:00+fold1"``.
    (AT and INTERVAL fires use the UTC instant's isoformat as their key instead.)
    """
    return f"{local.replace(tzinfo=None, fold=0).isoformat()}+fold{local.fold}"


def _utc(dt: datetime, name: str) -> datetime:
    if dt.utcoffset() is None:
        raise ValueError(f"{name} must have a time zone")
    return dt.astimezone(UTC)


def _window(
    raw: Iterator[Fire], after: datetime, start: datetime | None, end: datetime | None
) -> Iterator[Fire]:
    for fire in raw:
        if (end is not None and fire.at > end) or fire.at >= LATEST_TIME:
            return
        if fire.at > after and (start is None or fire.at >= start):
            yield fire


def _interval_fires(s: Schedule, tz: ZoneInfo, lo: datetime) -> Iterator[Fire]:
    assert s.interval is not None
    anchor = _utc(s.anchor or s.start_at or EPOCH, "anchor")
    k = (lo - anchor) // s.interval  # floor: anchor + k*interval <= lo
    try:
        while True:
            at = anchor + k * s.interval
            yield Fire(key=at.isoformat(), at=at, local=at.astimezone(tz))
            k += 1
    except OverflowError:  # past year 9999
        return


def _cron_fires(s: Schedule, tz: ZoneInfo, lo: datetime) -> Iterator[Fire]:
    """Cron fires from somewhat before ``lo`` on, in order of instant (the window trims).

    Nominal times are mapped in order; their first instants never decrease, but a
    fold-1 instant (dst_overlap=BOTH) comes later, so fires wait in a heap until the
    first instant of a later nominal time passes them. Real fires at one instant
    collapse into the earliest; skip fires are each kept and come first.
    """
    assert s.cron is not None
    probe = max(lo, _EARLIEST) - _SECOND  # a fire at exactly lo needs its whole gap group
    try:
        begin = probe.astimezone(tz).replace(tzinfo=None, microsecond=0)
    except OverflowError:  # local time past year 9999
        return
    begin -= _fallback_margin(tz, probe)
    heap: list[tuple[datetime, int, int, Fire]] = []
    last_real: datetime | None = None
    seq = 0

    def drain(before: datetime | None) -> Iterator[Fire]:
        nonlocal last_real
        while heap and (before is None or heap[0][0] < before):
            at, rank, _, fire = heapq.heappop(heap)
            if rank == 1:
                if at == last_real:
                    continue
                last_real = at
            yield fire

    for nominal in _nominal_times(s.cron, begin):
        try:
            fires = _map_nominal(s, tz, nominal)
        except OverflowError:  # the instant is past year 9999
            break
        yield from drain(fires[0].at)
        for fire in fires:
            heapq.heappush(heap, (fire.at, 0 if fire.skip_reason else 1, seq, fire))
            seq += 1
    yield from drain(None)


def _fallback_margin(tz: ZoneInfo, at: datetime) -> timedelta:
    """How far wall time falls back soon after ``at``: fold-1 fires of that many earlier
    wall times are still ahead."""
    offset = lowest = at.astimezone(tz).utcoffset()
    for h in range(1, _FALLBACK_PROBE_HOURS + 1):
        if at > datetime.max.replace(tzinfo=UTC) - timedelta(hours=h + 24):
            break
        lowest = min(lowest, (at + timedelta(hours=h)).astimezone(tz).utcoffset())  # type: ignore[type-var]
    return max(timedelta(0), offset - lowest)  # type: ignore[operator]


def _nominal_times(expr: str, begin: datetime) -> Iterator[datetime]:
    """Naive wall times matching ``expr`` strictly after ``begin``, in order.

    croniter finds the matching days (all the DOM/DOW/L/#/W rules); the times within a
    day are the product of croniter's expansion of the hour, minute and second fields,
    which is much faster than one croniter step per fire.
    """
    fields = expr.split()
    expanded = croniter(expr, begin).expanded
    minutes, hours = _values(expanded[0], 60), _values(expanded[1], 24)
    seconds = _values(expanded[5], 60) if len(fields) == 6 else [0]
    days = croniter(
        " ".join(["0", "0", *fields[2:5]]), datetime.combine(begin.date(), time.min) - _SECOND
    )
    first = (begin.hour, begin.minute)
    while True:
        try:
            day = days.get_next(datetime)
        except (ValueError, OverflowError):  # no further match, or past year 9999
            return
        y, mo, d = day.year, day.month, day.day
        is_first = day.date() == begin.date()
        for h in hours:
            if is_first and h < first[0]:
                continue
            for m in minutes:
                if is_first and (h, m) < first:
                    continue
                for sec in seconds:
                    t = datetime(y, mo, d, h, m, sec)
                    if t > begin:
                        yield t


def _values(expanded: list[int | str], size: int) -> list[int]:
    return list(range(size)) if expanded == ["*"] else sorted(int(v) for v in expanded)


def _map_nominal(s: Schedule, tz: ZoneInfo, nominal: datetime) -> list[Fire]:
    """The fire(s) of one nominal wall time; the first has the earliest instant."""
    key = fire_key(nominal)
    local0 = nominal.replace(tzinfo=tz)
    local1 = nominal.replace(tzinfo=tz, fold=1)
    at0 = local0.astimezone(UTC)
    if local0.utcoffset() == local1.utcoffset():  # the common case: exists, once
        return [Fire(key=key, at=at0, local=local0)]
    if at0.astimezone(tz).replace(tzinfo=None) != nominal:  # no round trip: in a gap
        at = _gap_end(tz, nominal, local1.astimezone(UTC), at0)
        reason = RunReason.DST_GAP if s.dst_gap == DstGap.SKIP else RunReason.NONE
        return [Fire(key=key, at=at, local=at.astimezone(tz), skip_reason=reason)]
    fires = [Fire(key=key, at=at0, local=local0)]
    if s.dst_overlap == DstOverlap.BOTH:
        fires.append(Fire(key=fire_key(local1), at=local1.astimezone(UTC), local=local1))
    return fires


def _gap_end(tz: ZoneInfo, nominal: datetime, below: datetime, above: datetime) -> datetime:
    """The transition instant of the gap holding ``nominal``: the first instant whose wall
    time is at or after it. Bisects whole seconds; wall(below) < nominal <= wall(above)."""
    lo, hi = int(below.timestamp()), int(above.timestamp())
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).replace(tzinfo=None) >= nominal:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)


# --------------------------------------------------------------------------- jitter, durations


def jitter_delay(job_id: str, fire_key: str, jitter: timedelta) -> timedelta:
    """A stable delay in [0, jitter) at millisecond resolution, from job id and fire key."""
    span = jitter // timedelta(milliseconds=1)
    if span <= 0:
        return timedelta(0)
    digest = hashlib.blake2b(f"{job_id}\0{fire_key}".encode(), digest_size=8).digest()
    return timedelta(milliseconds=int.from_bytes(digest, "big") % span)


_UNIT_US = {"ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000, "d": 86_400_000_000}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_PART = re.compile(rf"({_NUMBER})(ms|s|m|h|d)")
_DURATION = re.compile(rf"(?:{_NUMBER}(?:ms|s|m|h|d))+")


def parse_duration(text: str) -> timedelta:
    """``"500ms"``, ``"30s"``, ``"5m"``, ``"1h30m"``, ``"2d"``, ``"1.5h"``; a plain number is seconds."""
    t = text.strip() if isinstance(text, str) else ""
    if t.startswith("-"):
        raise ValueError(f"duration must not be negative: {text!r}")
    if re.fullmatch(_NUMBER, t):
        micros = Decimal(t) * _UNIT_US["s"]
    elif _DURATION.fullmatch(t):
        micros = sum(Decimal(n) * _UNIT_US[u] for n, u in _PART.findall(t))
    else:
        raise ValueError(f"invalid duration {text!r} (try 500ms, 30s, 5m, 1h30m, 2d)")
    try:
        return timedelta(microseconds=int(micros.to_integral_value()))
    except OverflowError:
        raise ValueError(f"duration too large: {text!r}") from None


def format_duration(d: timedelta) -> str:
    """``"1h30m"``, ``"45s"``, ``"250ms"``, ``"0s"``; ``parse_duration`` reads it back exactly."""
    if d < timedelta(0):
        return "-" + format_duration(-d)
    rest = d // timedelta(microseconds=1)
    if rest == 0:
        return "0s"
    parts = []
    for unit in ("d", "h", "m", "s"):
        n, rest = divmod(rest, _UNIT_US[unit])
        if n:
            parts.append(f"{n}{unit}")
    if rest:
        parts.append(f"{Decimal(rest) / 1000:f}ms")
    return "".join(parts)
