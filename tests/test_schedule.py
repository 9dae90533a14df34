"""Schedule maths: exact instants around DST transitions, leap days, windows, validation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import groupby
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from shardcron.client.errors import InvalidArgument
from shardcron.client.schedule import (
    fire_key,
    format_duration,
    iter_fires,
    jitter_delay,
    next_fire,
    parse_duration,
    preview,
    validate_schedule,
)
from shardcron.client.types import DstGap, DstOverlap, RunReason, Schedule, ScheduleKind

BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"
LORD_HOWE = "Australia/Lord_Howe"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def cron(expr: str, tz: str = "UTC", **kw: object) -> Schedule:
    return Schedule.cron_expr(expr, tz, **kw)


def fires_between(s: Schedule, start: datetime, end: datetime) -> list:
    out = []
    for f in iter_fires(s, start):
        if f.at >= end:
            return out
        out.append(f)
    return out


def transitions(zone: str, year: int) -> list[tuple[datetime, timedelta, timedelta]]:
    """(instant, offset before, offset after) of each offset change of ``zone`` in ``year``."""
    tz, out = ZoneInfo(zone), []
    t = utc(year, 1, 1)
    prev = t.astimezone(tz).utcoffset()
    while t.year == year:
        t2 = t + timedelta(minutes=30)
        off = t2.astimezone(tz).utcoffset()
        if off != prev:
            out.append((t2, prev, off))
            prev = off
        t = t2
    return out


# --------------------------------------------------------------------------- Berlin spring forward


def test_berlin_transitions_2026_are_what_the_tests_assume():
    assert [t for t, _, _ in transitions(BERLIN, 2026)] == [
        utc(2026, 3, 29, 1),
        utc(2026, 10, 25, 1),
    ]


def test_berlin_spring_daily_shift_fires_at_the_transition():
    fires = preview(cron("30 2 * * *", BERLIN), utc(2026, 3, 28), 3)
    assert [f.at for f in fires] == [
        utc(2026, 3, 28, 1, 30),
        utc(2026, 3, 29, 1),
        utc(2026, 3, 30, 0, 30),
    ]
    gap = fires[1]
    assert gap.key == "2026-03-29T02:30:00+fold0"
    assert gap.skip_reason == RunReason.NONE
    assert gap.local == datetime(2026, 3, 29, 3, 0, tzinfo=ZoneInfo(BERLIN))
    assert gap.local.utcoffset() == timedelta(hours=2)


def test_berlin_spring_daily_skip_yields_a_dst_gap_fire():
    s = cron("30 2 * * *", BERLIN, dst_gap=DstGap.SKIP)
    skipped, following = preview(s, utc(2026, 3, 28, 12), 2)
    assert skipped.skip_reason == RunReason.DST_GAP
    assert skipped.at == utc(2026, 3, 29, 1)
    assert skipped.key == "2026-03-29T02:30:00+fold0"
    assert following.skip_reason == RunReason.NONE
    assert following.at == utc(2026, 3, 30, 0, 30)


def test_berlin_spring_quarter_hours_collapse_into_one_fire_at_three():
    s = cron("*/15 * * * *", BERLIN)
    fires = fires_between(s, utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1, 31))
    assert [(f.at, f.key) for f in fires] == [
        (utc(2026, 3, 29, 0, 45), "2026-03-29T01:45:00+fold0"),
        (utc(2026, 3, 29, 1, 0), "2026-03-29T02:00:00+fold0"),
        (utc(2026, 3, 29, 1, 15), "2026-03-29T03:15:00+fold0"),
        (utc(2026, 3, 29, 1, 30), "2026-03-29T03:30:00+fold0"),
    ]
    assert fires[1].local.hour == 3 and fires[1].local.utcoffset() == timedelta(hours=2)
    # The collapsed fire keeps its key however the iteration starts.
    assert next_fire(s, utc(2026, 3, 29, 0, 59, 59, 999999)).key == "2026-03-29T02:00:00+fold0"
    windowed = cron("*/15 * * * *", BERLIN, start_at=utc(2026, 3, 29, 1))
    assert next_fire(windowed, utc(2026, 1, 1)).key == "2026-03-29T02:00:00+fold0"
    assert next_fire(s, utc(2026, 3, 29, 1)).at == utc(2026, 3, 29, 1, 15)


def test_berlin_spring_quarter_hours_skip_keeps_every_skip_then_the_real_fire():
    s = cron("*/15 * * * *", BERLIN, dst_gap=DstGap.SKIP)
    fires = fires_between(s, utc(2026, 3, 29, 0, 50), utc(2026, 3, 29, 1, 1))
    assert [(f.key, f.skip_reason) for f in fires] == [
        ("2026-03-29T02:00:00+fold0", RunReason.DST_GAP),
        ("2026-03-29T02:15:00+fold0", RunReason.DST_GAP),
        ("2026-03-29T02:30:00+fold0", RunReason.DST_GAP),
        ("2026-03-29T02:45:00+fold0", RunReason.DST_GAP),
        ("2026-03-29T03:00:00+fold0", RunReason.NONE),
    ]
    assert {f.at for f in fires} == {utc(2026, 3, 29, 1)}


# --------------------------------------------------------------------------- Berlin fall back


def test_berlin_fall_daily_first_fires_once():
    s = cron("30 2 * * *", BERLIN)
    fires = fires_between(s, utc(2026, 10, 24, 12), utc(2026, 10, 25, 12))
    assert [(f.at, f.key) for f in fires] == [
        (utc(2026, 10, 25, 0, 30), "2026-10-25T02:30:00+fold0")
    ]


def test_berlin_fall_daily_both_fires_twice():
    s = cron("30 2 * * *", BERLIN, dst_overlap=DstOverlap.BOTH)
    first, second = fires_between(s, utc(2026, 10, 24, 12), utc(2026, 10, 25, 12))
    assert (first.at, first.key) == (utc(2026, 10, 25, 0, 30), "2026-10-25T02:30:00+fold0")
    assert (second.at, second.key) == (utc(2026, 10, 25, 1, 30), "2026-10-25T02:30:00+fold1")
    assert first.local.fold == 0 and first.local.utcoffset() == timedelta(hours=2)
    assert second.local.fold == 1 and second.local.utcoffset() == timedelta(hours=1)
    # From inside the first occurrence the fold-1 fire is still ahead.
    assert next_fire(s, utc(2026, 10, 25, 0, 45)).key == "2026-10-25T02:30:00+fold1"


@pytest.mark.parametrize(("overlap", "count"), [(DstOverlap.FIRST, 24), (DstOverlap.BOTH, 25)])
def test_berlin_fall_hourly_counts_over_the_local_day(overlap, count):
    s = cron("0 * * * *", BERLIN, dst_overlap=overlap)
    # 2026-10-25 00:00 CEST .. 2026-10-26 00:00 CET: a 25-hour local day.
    fires = fires_between(s, utc(2026, 10, 24, 21, 59), utc(2026, 10, 25, 23))
    assert len(fires) == count
    assert len({f.at for f in fires}) == count
    assert fires == sorted(fires, key=lambda f: f.at)
    both = overlap == DstOverlap.BOTH
    assert both == ("2026-10-25T02:00:00+fold1" in {f.key for f in fires})
    assert both == (utc(2026, 10, 25, 1) in {f.at for f in fires})


def test_berlin_fall_half_hours_both_are_in_instant_order():
    s = cron("*/30 * * * *", BERLIN, dst_overlap=DstOverlap.BOTH)
    fires = preview(s, utc(2026, 10, 24, 23, 45), 5)
    assert [(f.at, f.key) for f in fires] == [
        (utc(2026, 10, 25, 0, 0), "2026-10-25T02:00:00+fold0"),
        (utc(2026, 10, 25, 0, 30), "2026-10-25T02:30:00+fold0"),
        (utc(2026, 10, 25, 1, 0), "2026-10-25T02:00:00+fold1"),
        (utc(2026, 10, 25, 1, 30), "2026-10-25T02:30:00+fold1"),
        (utc(2026, 10, 25, 2, 0), "2026-10-25T03:00:00+fold0"),
    ]


# --------------------------------------------------------------------------- New York


def test_new_york_transitions_2026():
    assert [t for t, _, _ in transitions(NEW_YORK, 2026)] == [
        utc(2026, 3, 8, 7),
        utc(2026, 11, 1, 6),
    ]


def test_new_york_spring_gap():
    shift = preview(cron("30 2 * * *", NEW_YORK), utc(2026, 3, 7, 12), 2)
    assert [f.at for f in shift] == [utc(2026, 3, 8, 7), utc(2026, 3, 9, 6, 30)]
    assert shift[0].local.hour == 3 and shift[0].local.minute == 0
    skip = preview(cron("30 2 * * *", NEW_YORK, dst_gap=DstGap.SKIP), utc(2026, 3, 7, 12), 2)
    assert [f.skip_reason for f in skip] == [RunReason.DST_GAP, RunReason.NONE]


def test_new_york_fall_overlap():
    window = (utc(2026, 10, 31, 12), utc(2026, 11, 1, 12))
    first = fires_between(cron("30 1 * * *", NEW_YORK), *window)
    assert [f.at for f in first] == [utc(2026, 11, 1, 5, 30)]
    both = fires_between(cron("30 1 * * *", NEW_YORK, dst_overlap=DstOverlap.BOTH), *window)
    assert [f.at for f in both] == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30)]
    assert [f.key for f in both] == ["2026-11-01T01:30:00+fold0", "2026-11-01T01:30:00+fold1"]
    assert fires_between(cron("30 2 * * *", NEW_YORK), *window)[0].at == utc(2026, 11, 1, 7, 30)


# --------------------------------------------------------------------------- Lord Howe (30 minutes)


@pytest.fixture(scope="module")
def lord_howe_2026():
    (end_dst, b1, a1), (start_dst, b2, a2) = transitions(LORD_HOWE, 2026)
    assert b1 - a1 == timedelta(minutes=30) and a2 - b2 == timedelta(minutes=30)
    tz = ZoneInfo(LORD_HOWE)
    # Ends the first Sunday of April at 02:00 -> 01:30, starts the first Sunday of October
    # at 02:00 -> 02:30 (local wall times just before each transition).
    assert (end_dst - timedelta(seconds=1)).astimezone(tz).replace(tzinfo=None) == datetime(
        2026, 4, 5, 1, 59, 59
    )
    assert (start_dst - timedelta(seconds=1)).astimezone(tz).replace(tzinfo=None) == datetime(
        2026, 10, 4, 1, 59, 59
    )
    return end_dst, start_dst


def test_lord_howe_spring_shift_fires_at_half_past_two(lord_howe_2026):
    _, start_dst = lord_howe_2026
    s = cron("15 2 * * *", LORD_HOWE)
    fire = next_fire(s, start_dst - timedelta(hours=12))
    assert fire.at == start_dst == utc(2026, 10, 3, 15, 30)
    assert (fire.local.hour, fire.local.minute) == (2, 30)
    assert fire.key == "2026-10-04T02:15:00+fold0"
    assert next_fire(s, fire.at).at == utc(2026, 10, 4, 15, 15)


def test_lord_howe_overlap_both_fires_thirty_minutes_apart(lord_howe_2026):
    end_dst, _ = lord_howe_2026
    s = cron("45 1 * * *", LORD_HOWE, dst_overlap=DstOverlap.BOTH)
    first, second = fires_between(s, end_dst - timedelta(hours=6), end_dst + timedelta(hours=6))
    assert second.at - first.at == timedelta(minutes=30)
    assert (first.at, second.at) == (utc(2026, 4, 4, 14, 45), utc(2026, 4, 4, 15, 15))
    assert [f.key for f in (first, second)] == [
        "2026-04-05T01:45:00+fold0",
        "2026-04-05T01:45:00+fold1",
    ]
    only = fires_between(
        cron("45 1 * * *", LORD_HOWE), end_dst - timedelta(hours=6), end_dst + timedelta(hours=6)
    )
    assert [f.at for f in only] == [first.at]


# --------------------------------------------------------------------------- key stability


@pytest.mark.parametrize(
    ("expr", "zone", "kw", "start"),
    [
        ("*/15 * * * *", BERLIN, {}, utc(2026, 3, 28, 23)),
        ("*/15 * * * *", BERLIN, {"dst_gap": DstGap.SKIP}, utc(2026, 3, 28, 23)),
        ("*/20 * * * *", BERLIN, {"dst_overlap": DstOverlap.BOTH}, utc(2026, 10, 24, 22)),
        ("*/10 * * * *", LORD_HOWE, {"dst_overlap": DstOverlap.BOTH}, utc(2026, 4, 4, 12)),
        ("*/10 * * * *", LORD_HOWE, {}, utc(2026, 10, 3, 12)),
    ],
)
def test_fires_do_not_depend_on_where_iteration_starts(expr, zone, kw, start):
    s = cron(expr, zone, **kw)
    fires = preview(s, start, 60)
    assert [f.at for f in fires] == sorted(f.at for f in fires)
    assert len({f.key for f in fires}) == len(fires)
    for at, group in groupby(fires, key=lambda f: f.at):
        group = list(group)
        assert preview(s, at - timedelta(microseconds=1), len(group)) == group
        assert preview(cron(expr, zone, start_at=at, **kw), start, len(group)) == group
        assert [f.at for f in group if f.skip_reason == RunReason.NONE] in ([], [at])


# --------------------------------------------------------------------------- leap days, seconds


def test_feb_29_fires_on_leap_days_only():
    s = cron("0 0 29 2 *")
    assert [f.at for f in preview(s, utc(2026, 1, 1), 2)] == [utc(2028, 2, 29), utc(2032, 2, 29)]


def test_daily_interval_across_leap_day():
    s = Schedule.every(timedelta(days=1), anchor=utc(2028, 2, 27, 12))
    assert [f.at for f in preview(s, utc(2028, 2, 27), 4)] == [
        utc(2028, 2, 27, 12),
        utc(2028, 2, 28, 12),
        utc(2028, 2, 29, 12),
        utc(2028, 3, 1, 12),
    ]


def test_six_fields_have_seconds_last():
    every_ten = preview(cron("* * * * * */10"), utc(2026, 5, 1, 12, 0, 5), 3)
    assert [f.at for f in every_ten] == [
        utc(2026, 5, 1, 12, 0, 10),
        utc(2026, 5, 1, 12, 0, 20),
        utc(2026, 5, 1, 12, 0, 30),
    ]
    assert every_ten[0].key == "2026-05-01T12:00:10+fold0"
    # Seconds LAST: "*/10 * * * * 0-59" is every second of minutes 0, 10, 20, ...
    first_minute = preview(cron("*/10 * * * * 0-59"), utc(2026, 5, 1, 12, 9, 58), 3)
    assert [f.at for f in first_minute] == [
        utc(2026, 5, 1, 12, 10, 0),
        utc(2026, 5, 1, 12, 10, 1),
        utc(2026, 5, 1, 12, 10, 2),
    ]
    noonish = preview(cron("0 0 12 * * 30"), utc(2026, 5, 13), 2)
    assert [f.at for f in noonish] == [utc(2026, 6, 12, 0, 0, 30), utc(2026, 7, 12, 0, 0, 30)]


@pytest.mark.parametrize(
    ("expr", "hint"),
    [
        ("*/5 * * * * *", "for seconds '*/5' write '* * * * * */5'"),
        ("0 30 9 * * *", "for seconds '0' write '30 9 * * * 0'"),
    ],
)
def test_six_fields_with_seconds_written_first_are_refused(expr: str, hint: str) -> None:
    """Regression: ``*/5 * * * * *`` meant as every 5 seconds (seconds first, as in
    Quartz) was taken silently as every second of every 5th minute."""
    with pytest.raises(InvalidArgument) as e:
        validate_schedule(cron(expr), field="spec.schedule")
    assert e.value.field == "spec.schedule.cron"
    assert "the seconds field comes last" in str(e.value) and hint in str(e.value)
    validate_schedule(cron("* * * * * *"))  # every second, written plainly, is fine
    validate_schedule(cron("*/5 * * * * 0-59"))  # and so is every second of some minutes


@pytest.mark.parametrize(
    "expr",
    [
        "*/7 3-5 * * *",
        "0 0 L * *",
        "0 9 * * 1-5",
        "0 0 * * 5#2",
        "30 6 1,15 * 1",
        "0 0 1 */3 *",
        "15 */6 * * * 0,30",
    ],
)
def test_utc_fires_match_croniter(expr):
    start = datetime(2026, 1, 30, 23, 59, 30)
    it = croniter(expr, start)
    expected = [it.get_next(datetime).replace(tzinfo=UTC) for _ in range(40)]
    assert [f.at for f in preview(cron(expr), start.replace(tzinfo=UTC), 40)] == expected


def test_never_firing_and_sparse_crons_terminate():
    assert next_fire(cron("0 0 30 2 *"), utc(2026, 1, 1)) is None
    ended = cron("0 0 29 2 *", end_at=utc(2027, 1, 1))
    assert preview(ended, utc(2026, 1, 1), 5) == []


def test_preview_of_a_thousand_minutely_fires_across_a_dst_gap():
    # speed is for benchmarks; here: a long preview through the gap stays exact
    s = cron("* * * * *", BERLIN)
    fires = preview(s, utc(2026, 3, 29), 1000)
    assert len(fires) == 1000
    assert len({f.at for f in fires}) == 1000
    assert all(b.at - a.at == timedelta(minutes=1) for a, b in zip(fires, fires[1:], strict=False))


# --------------------------------------------------------------------------- windows, intervals, AT


def test_cron_window():
    s = cron("0 * * * *", start_at=utc(2026, 6, 1, 3), end_at=utc(2026, 6, 1, 6))
    assert [f.at.hour for f in preview(s, utc(2026, 1, 1), 10)] == [3, 4, 5, 6]
    assert [f.at.hour for f in preview(s, utc(2026, 6, 1, 4), 10)] == [5, 6]


def test_interval_with_anchor():
    s = Schedule.every(timedelta(minutes=15), anchor=utc(2026, 1, 1, 10, 5))
    fires = preview(s, utc(2026, 11, 25, 10, 20), 2)
    assert [f.at for f in fires] == [utc(2026, 11, 25, 10, 35), utc(2026, 11, 25, 10, 50)]
    assert fires[0].key == "2026-11-25T10:35:00+00:00"
    assert next_fire(s, utc(2026, 11, 25, 10, 35)).at == utc(2026, 11, 25, 10, 50)
    assert next_fire(s, utc(2025, 12, 31)).at == utc(2025, 12, 31, 0, 5)  # before the anchor too


def test_interval_window_and_default_anchors():
    s = Schedule.every(
        timedelta(hours=2), start_at=utc(2026, 11, 25, 9, 30), end_at=utc(2026, 11, 25, 15, 30)
    )
    assert [f.key for f in preview(s, utc(2026, 1, 1), 10)] == [
        "2026-11-25T09:30:00+00:00",
        "2026-11-25T11:30:00+00:00",
        "2026-11-25T13:30:00+00:00",
        "2026-11-25T15:30:00+00:00",
    ]
    epoch = Schedule.every(timedelta(hours=1), timezone=BERLIN)
    fire = next_fire(epoch, utc(2026, 11, 25, 9, 30))
    assert fire.at == utc(2026, 11, 25, 10) and fire.local.hour == 11


def test_at_past_future_and_window():
    at = utc(2026, 11, 25, 10)
    s = Schedule.once_at(at)
    assert [(f.key, f.at) for f in preview(s, utc(2026, 1, 1), 5)] == [
        ("2026-11-25T10:00:00+00:00", at)
    ]
    assert next_fire(s, at) is None
    assert next_fire(s, utc(2027, 1, 1)) is None
    assert (
        next_fire(Schedule(kind=ScheduleKind.AT, at=at, end_at=utc(2026, 11, 1)), utc(2026, 1, 1))
        is None
    )
    berlin = Schedule(
        kind=ScheduleKind.AT,
        at=datetime(2026, 11, 25, 11, tzinfo=ZoneInfo(BERLIN)),
        timezone=BERLIN,
    )
    fire = next_fire(berlin, utc(2026, 1, 1))
    assert fire.at == at and fire.at.tzinfo is UTC and fire.key == "2026-11-25T10:00:00+00:00"


def test_immediate_and_naive_after_are_rejected():
    with pytest.raises(ValueError):
        iter_fires(Schedule.immediate(), utc(2026, 1, 1))
    with pytest.raises(ValueError):
        next_fire(cron("* * * * *"), datetime(2026, 1, 1))


def test_fire_key_format():
    assert fire_key(datetime(2026, 10, 25, 2, 30, fold=1)) == "2026-10-25T02:30:00+fold1"
    aware = datetime(2026, 10, 25, 2, 30, tzinfo=ZoneInfo(BERLIN))
    assert fire_key(aware) == "2026-10-25T02:30:00+fold0"


# --------------------------------------------------------------------------- jitter


def test_jitter_delay_is_stable_and_bounded():
    jitter = timedelta(seconds=30)
    delays = [jitter_delay("job-1", f"2026-01-01T00:{m:02d}:00+fold0", jitter) for m in range(60)]
    assert all(timedelta(0) <= d < jitter for d in delays)
    assert all(d.microseconds % 1000 == 0 for d in delays)
    assert len(set(delays)) > 40
    assert delays[7] == jitter_delay("job-1", "2026-01-01T00:07:00+fold0", jitter)
    assert jitter_delay("job-1", "k", timedelta(0)) == timedelta(0)
    assert jitter_delay("job-1", "k", timedelta(microseconds=900)) == timedelta(0)


# --------------------------------------------------------------------------- validation

VALIDATION_ERRORS = [
    (cron("61 * * * *"), "schedule.cron"),
    (cron("* * *"), "schedule.cron"),
    (cron("not a cron"), "schedule.cron"),
    (cron("0 0 * * * * 2030"), "schedule.cron"),
    (cron("R * * * *"), "schedule.cron"),
    (cron("0 0 30 2 *"), "schedule.cron"),
    (Schedule(kind=ScheduleKind.CRON), "schedule.cron"),
    (cron("* * * * *", "Mars/Olympus"), "schedule.timezone"),
    (cron("* * * * *", ""), "schedule.timezone"),
    (Schedule.every(timedelta(0)), "schedule.interval"),
    (Schedule.every(timedelta(seconds=-5)), "schedule.interval"),
    (Schedule.every(timedelta(milliseconds=500)), "schedule.interval"),
    (Schedule(kind=ScheduleKind.INTERVAL), "schedule.interval"),
    (Schedule(kind=ScheduleKind.AT), "schedule.at"),
    (Schedule.once_at(datetime(2026, 1, 1)), "schedule.at"),
    (Schedule.every(timedelta(1), anchor=datetime(2026, 1, 1)), "schedule.anchor"),
    (cron("* * * * *", start_at=datetime(2026, 1, 1)), "schedule.start_at"),
    (cron("* * * * *", jitter=timedelta(seconds=-1)), "schedule.jitter"),
    (cron("* * * * *", start_at=utc(2026, 2, 1), end_at=utc(2026, 1, 1)), "schedule.end_at"),
    (cron("* * * * *", start_at=utc(2026, 1, 1), end_at=utc(2026, 1, 1)), "schedule.end_at"),
]


@pytest.mark.parametrize(("schedule", "field"), VALIDATION_ERRORS)
def test_validate_schedule_errors(schedule, field):
    with pytest.raises(InvalidArgument) as info:
        validate_schedule(schedule)
    assert info.value.field == field
    assert info.value.reason[:1].islower()


def test_validate_schedule_reasons_and_field_prefix():
    with pytest.raises(InvalidArgument) as info:
        validate_schedule(cron("0 0 30 2 *"), field="spec.schedule")
    assert (info.value.field, info.value.reason) == ("spec.schedule.cron", "never fires")
    with pytest.raises(InvalidArgument) as info:
        validate_schedule(cron("* * * * *", "Mars/Olympus"))
    assert info.value.reason == "unknown time zone 'Mars/Olympus'"
    with pytest.raises(InvalidArgument) as info:
        validate_schedule(Schedule.once_at(datetime(2026, 1, 1)))
    assert info.value.reason == "must have a time zone"


@pytest.mark.parametrize(
    "schedule",
    [
        Schedule.immediate(),
        Schedule.once_at(utc(2020, 1, 1)),
        cron("0 0 29 2 *", BERLIN, jitter=timedelta(seconds=5)),
        cron("* * * * * */10", LORD_HOWE),
        cron("0 9 * * mon-fri", NEW_YORK, start_at=utc(2026, 1, 1), end_at=utc(2026, 1, 2)),
        Schedule.every(timedelta(seconds=1), anchor=utc(2026, 1, 1)),
    ],
)
def test_validate_schedule_accepts(schedule):
    validate_schedule(schedule)


# --------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", timedelta(milliseconds=500)),
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2d", timedelta(days=2)),
        ("1.5h", timedelta(hours=1, minutes=30)),
        ("90", timedelta(seconds=90)),
        ("0.25", timedelta(milliseconds=250)),
        (" 1d2h3m4s5ms ", timedelta(days=1, hours=2, minutes=3, seconds=4, milliseconds=5)),
        ("0", timedelta(0)),
    ],
)
def test_parse_duration(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text", ["", "abc", "-5s", "-1", "5x", "1h-30m", "h", "1.2.3s", "5 m", "1e3", "99999999999d"]
)
def test_parse_duration_errors(text):
    with pytest.raises(ValueError, match=r"\w"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("d", "text"),
    [
        (timedelta(hours=1, minutes=30), "1h30m"),
        (timedelta(seconds=45), "45s"),
        (timedelta(milliseconds=250), "250ms"),
        (timedelta(0), "0s"),
        (timedelta(days=2, seconds=1, milliseconds=500), "2d1s500ms"),
        (timedelta(microseconds=1500), "1.5ms"),
    ],
)
def test_format_duration_round_trips(d, text):
    assert format_duration(d) == text
    assert parse_duration(text) == d


def test_a_fleet_on_one_cron_shares_the_next_fire_it_asks_for():
    # thousands of jobs on one expression come due together; croniter runs once
    after = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    first = next_fire(Schedule.cron_expr("* * * * *"), after)
    again = next_fire(Schedule.cron_expr("* * * * *"), after)
    assert first is again
    assert first is not None and first.at == after + timedelta(minutes=1)
    # the same instant in another zone names the same fire
    assert (
        next_fire(Schedule.cron_expr("* * * * *"), after.astimezone(ZoneInfo("Asia/Tokyo")))
        == first
    )
