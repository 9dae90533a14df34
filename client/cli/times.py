"""How times and durations read in what the commands print.

A ``TimeView`` shows times in one zone: a cron job's own zone (its fires are meant in
it), the local zone for everything else, or UTC with ``--utc``. ``when`` gives a
date and a time to the second, ``precise`` adds milliseconds (runs are often shorter
than a second), and ``took`` is a run's duration, to the millisecond below a minute.
JSON output never goes through here: it keeps ISO 8601 in UTC.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from shardcron.client.types import Schedule, ScheduleKind


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeView:
    """Times shown in ``zone`` (None: the local zone), named ``label`` in headers."""

    zone: tzinfo | None
    label: str

    def _in_zone(self, dt: datetime) -> datetime:
        return dt.astimezone(self.zone)

    def when(self, dt: datetime | None, *, with_zone: bool = False, short: bool = False) -> str:
        """``2026-11-26 15:00:10`` (``CET`` after it with ``with_zone``), or ``-``. With
        ``short`` (table cells) a date of the current year drops its year: ``11-26``."""
        if dt is None:
            return "-"
        local = self._in_zone(dt)
        this_year = local.year == datetime.now(local.tzinfo).year
        text = local.strftime("%m-%d %H:%M:%S" if short and this_year else "%Y-%m-%d %H:%M:%S")
        return f"{text} {local.tzname()}" if with_zone else text

    def precise(self, dt: datetime | None, *, day_of: datetime | None = None) -> str:
        """``15:00:10.012``, with the date before it unless it is the day of ``day_of``."""
        if dt is None:
            return "-"
        local = self._in_zone(dt)
        text = local.strftime("%H:%M:%S.") + f"{local.microsecond // 1000:03d}"
        if day_of is not None and self._in_zone(day_of).date() == local.date():
            return text
        return f"{local.strftime('%Y-%m-%d')} {text}"


def view(schedule: Schedule | None, *, utc: bool) -> TimeView:
    """UTC with ``utc``; else a cron schedule's zone; else the local zone."""
    if utc:
        return TimeView(zone=UTC, label="UTC")
    if schedule is not None and schedule.kind is ScheduleKind.CRON:
        try:
            return TimeView(zone=ZoneInfo(schedule.timezone), label=schedule.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return TimeView(zone=None, label=f"local, {datetime.now().astimezone().tzname()}")


def took(started: datetime | None, ended: datetime | None) -> str:
    """``12ms``, ``1.204s``, ``2m03s``, ``1h02m``, ``3d04h``; ``-`` unless both are known."""
    if started is None or ended is None:
        return "-"
    return short_duration(max(ended - started, timedelta(0)))


def short_duration(d: timedelta) -> str:
    """A duration in at most two units, to the millisecond below a minute."""
    ms = d // timedelta(milliseconds=1)
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.3f}s"
    s = ms // 1000
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86_400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86_400}d{s % 86_400 // 3600:02d}h"
