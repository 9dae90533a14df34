"""The benchmark harness's pure parts: the JSON entries, medians with spread, a peer
tried once more before it is reported failed, W3's timetable and W4's minutes."""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bench.common import CpuMeter, per_1000, thread_seconds
from bench.outcomes import ENTRY_FIELDS, Result, entries, failed_results, spread, twice
from bench.workloads import (
    RunTime,
    arrivals,
    due_batches,
    due_instant,
    highest_held,
    lag_by_notice,
    minute_marks,
)


def _w1(rate: float, cpu: float, completed: int = 100, config_id: str = "celery-prefetch1"):
    return Result(
        system="celery+redis, prefork x2, prefetch 1",
        workload="W1",
        n=100,
        key="celery",
        config_id=config_id,
        e2e_rate=rate,
        submit_rate=rate * 2,
        cpu_per_1000={"workers": cpu, "total": cpu},
        completed=completed,
    )


def test_entries_have_exactly_the_issue_fields_and_fold_repeats_into_medians() -> None:
    got = entries([_w1(10.0, 1.0), _w1(30.0, 3.0, completed=99), _w1(20.0, 2.0)])
    assert len(got) == 1
    [entry] = json.loads(json.dumps(got))
    assert tuple(entry) == ENTRY_FIELDS
    assert entry["system"] == "celery" and entry["config"] == "celery-prefetch1"
    assert entry["workload"] == "W1" and entry["jobs"] == 100
    assert entry["ended"] == 99  # the fewest any repetition saw end
    assert entry["e2e_per_s"] == 20.0 and entry["submit_per_s"] == 40.0
    assert entry["cpu_s_per_1000"] == 2.0
    assert entry["lag_p99_s"] is None  # not measured in W1: null


def test_one_entry_per_configuration_and_per_w3_rate() -> None:
    results = [_w1(1.0, 1.0), _w1(2.0, 1.0, config_id="celery-chunks100")]
    for rate in (100.0, 1000.0):
        results.append(Result(system="s", workload="W3", n=10, key="shardcron", rate=rate))
    got = entries(results)
    assert [(e["config"], e["workload"]) for e in got] == [
        ("celery-prefetch1", "W1"),
        ("celery-chunks100", "W1"),
        ("", "W3"),
        ("", "W3"),
    ]


def test_a_failed_system_has_an_entry_per_configuration_with_null_figures() -> None:
    configs = {"W1": ["celery-prefetch1", "celery-chunks100"], "W2": ["celery-prefetch1"]}
    failed = failed_results("celery", configs, {"W1": 10, "W2": 5}, ["W1"], "no redis")
    got = entries(failed)
    assert [e["config"] for e in got] == ["celery-prefetch1", "celery-chunks100"]
    assert all(e["ended"] == 0 and e["e2e_per_s"] is None for e in got)


def test_spread_is_median_min_max_of_the_values_present() -> None:
    s = spread([3.0, None, 1.0, 2.0, 10.0])
    assert s is not None and (s.median, s.low, s.high) == (2.5, 1.0, 10.0)
    assert spread([None]) is None


def test_a_peer_that_fails_once_is_tried_again() -> None:
    calls, failures = [], []

    def attempt() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("Frontend is not healthy yet")
        return "figures"

    value, error = twice(attempt, lambda n, e: failures.append((n, str(e))))
    assert (value, error) == ("figures", None)
    assert failures == [(1, "Frontend is not healthy yet")]


def test_a_peer_that_fails_twice_is_reported_not_raised() -> None:
    failures = []

    def attempt() -> str:
        raise TimeoutError(f"attempt {len(failures) + 1}")

    value, error = twice(attempt, lambda n, e: failures.append(n))
    assert value is None and str(error) == "attempt 2"
    assert failures == [1, 2]


def test_arrivals_are_evenly_spaced_and_due_within_five_seconds() -> None:
    plan = arrivals(100, 2.0, seed=1)
    assert len(plan) == 200
    assert plan[1][0] == pytest.approx(0.01)
    assert all(0.0 <= due - submit <= 5.0 for submit, due in plan)
    assert arrivals(100, 2.0, seed=1) == plan  # seeded: runs compare


def test_due_batches_take_what_has_come_due_once() -> None:
    plan = [(0.0, 1.0), (0.5, 1.0), (1.0, 2.0)]
    batch, sent = due_batches(plan, 0.6, 0)
    assert (len(batch), sent) == (2, 2)
    batch, sent = due_batches(plan, 0.7, sent)
    assert (batch, sent) == ([], 2)
    assert due_batches(plan, 5.0, sent) == ([(1.0, 2.0)], 3)


def test_minute_marks_are_the_whole_minutes_after_start() -> None:
    assert minute_marks(119.5, 2) == [120.0, 180.0]
    assert minute_marks(120.0, 1) == [180.0]  # strictly after


def test_highest_held_rate_stops_at_the_first_rate_not_held() -> None:
    by_rate = {100: (0.01, 10, 10), 1000: (2.0, 100, 100), 5000: (0.5, 500, 500)}
    assert highest_held(by_rate) == 100
    assert highest_held({100: (0.01, 9, 10)}) is None  # a job that never ran
    assert highest_held({100: (None, 0, 10)}) is None


def test_a_failed_w3_has_an_entry_though_w3_has_no_job_count() -> None:
    failed = failed_results("temporal", {"W3": ["dev-server"]}, {"W1": 10}, ["W3"], "down")
    [entry] = entries(failed)
    assert (entry["workload"], entry["jobs"], entry["lag_p99_s"]) == ("W3", 0, None)


def test_w4_counts_a_fire_once_per_job_and_minute_and_its_extra_runs_as_duplicates() -> None:
    from bench.workloads import RunTime, count_fires

    us = 1_000_000
    rows = [
        RunTime.from_row(("a", 1, 120 * us, 120 * us, 120 * us + 40_000)),  # 40 ms late
        RunTime.from_row(("a", 1, 120 * us, 120 * us, 120 * us + 90_000)),  # the same fire again
        RunTime.from_row(("a", 2, 120 * us, 121 * us, 121 * us)),  # a retry: not a fire
        RunTime.from_row(("b", 1, 120 * us, 120 * us, None)),  # never started: missed
        RunTime.from_row(("a", 1, 60 * us, 60 * us, 60 * us)),  # before the minutes watched
        RunTime.from_row(("b", 1, 180 * us, 180 * us, 180 * us - 30_000)),  # 30 ms early
    ]
    fired, duplicates, errors = count_fires(rows, [120.0, 180.0])
    assert (fired, duplicates) == (2, 1)
    assert errors == [pytest.approx(0.04), pytest.approx(0.03)]


def test_w3_lag_is_told_apart_by_the_notice_each_run_had() -> None:
    start = 1_800_000_000.123456
    schedule = arrivals(100, 2)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    runs = []
    for i, (sent, due) in enumerate(schedule):
        at = (due_instant(start, due) - epoch) // timedelta(microseconds=1) / 1e6
        late = 0.5 if due - sent < 1 else 0.01
        runs.append(RunTime(job_id=str(i), attempt=1, fire_at=at, due_at=at, started_at=at + late))
    runs.append(
        RunTime(job_id="x", attempt=1, fire_at=start + 99, due_at=start + 99, started_at=None)
    )
    short = sum(1 for sent, due in schedule if due - sent < 1)
    note = lag_by_notice(100, schedule, start, runs)
    assert note == (
        "at 100 jobs/s, start lag by notice (due less submit offset): "
        f"under 1 s: {short:,} runs, p99 0.500 s, 1 s or more: {200 - short:,} runs, p99 0.010 s"
    )


def test_a_warm_up_job_is_due_at_once_and_named_apart_from_the_workload() -> None:
    from bench.systems.shardcron_workloads import warm_up_spec
    from shardcron.client.types import HandlerTask, JobSpec, Schedule, ScheduleKind

    at = datetime(2030, 1, 1, tzinfo=UTC)
    storm = JobSpec(name="w2", task=HandlerTask(name="noop"), schedule=Schedule.once_at(at))
    warm = warm_up_spec(storm)
    assert warm.schedule.kind == ScheduleKind.IMMEDIATE, "a storm's instant held submits back"
    assert warm.name != storm.name and warm.task == storm.task


def test_s1_fire_error_is_signed_and_counts_each_unstarted_fire_of_a_seen_job_missed() -> None:
    from bench.workloads import RunTime, fire_errors

    us = 1_000_000
    rows = [
        RunTime.from_row(("a", 1, 120 * us, 120 * us, 120 * us + 90_000)),
        RunTime.from_row(("a", 1, 120 * us, 120 * us, 120 * us + 40_000)),  # the first start
        RunTime.from_row(("a", 2, 120 * us, 121 * us, 121 * us)),  # a retry: not a fire
        RunTime.from_row(("a", 1, 60 * us, 60 * us, 60 * us + 500_000)),  # not watched
        RunTime.from_row(("b", 1, 120 * us, 120 * us, 120 * us - 30_000)),  # 30 ms early
        RunTime.from_row(("b", 1, 180 * us, 180 * us, None)),  # never started
    ]
    errors, missed = fire_errors(rows, [120.0, 180.0])
    assert sorted(errors) == [pytest.approx(-0.03), pytest.approx(0.04)]
    assert missed == 2  # b at 180 never started, a at 180 has no run at all


def test_s1_timing_keeps_the_cold_first_call_apart_from_the_median() -> None:
    from bench.workloads import timing

    assert timing([0.5, 0.01, 0.03, 0.02]) == {"first": 0.5, "median": 0.025, "max": 0.5}
    assert timing([]) == {}


def test_s1_is_asked_for_by_name_and_quick_stores_a_tenth_of_the_full_count() -> None:
    from bench.workloads import DEFAULT_WORKLOADS, FULL, QUICK, WORKLOADS

    assert "S1" in WORKLOADS and "S1" not in DEFAULT_WORKLOADS
    assert (QUICK.n["S1"], FULL.n["S1"]) == (100_000, 1_000_000)
    assert "S1 100,000 jobs stored" in QUICK.describe(("S1",))


def test_s1_baseline_figures_sit_beside_the_figures_under_their_own_names() -> None:
    from bench.workloads import with_baseline

    both = with_baseline({"job_list_ms": 40.0}, {"job_list_ms": 3.0})
    assert both == {"job_list_ms": 40.0, "base_job_list_ms": 3.0}


def test_a_part_of_a_role_is_reported_beside_it_and_not_counted_twice_in_the_total() -> None:
    got = per_1000({"cassandra": 3.0, "nodes": 1.0, "jit of cassandra": 1.0}, 2000)
    assert got == {"cassandra": 1.5, "nodes": 0.5, "jit of cassandra": 0.5, "total": 2.0}


def test_a_part_is_the_cpu_its_named_threads_used_over_the_span() -> None:
    pid = os.getpid()
    main = Path(f"/proc/{pid}/task/{threading.get_native_id()}/comm").read_text().strip()
    assert thread_seconds(pid, (main,)), "the main thread is found by its name"
    assert thread_seconds(pid, ("no thread is named so",)) == {}
    meter = CpuMeter({}, parts={"busy of client": ([pid], (main,))})
    meter.start()
    began = time.process_time()
    while time.process_time() < began + 0.3:  # the main thread busy for 0.3 CPU-s
        pass
    cpu = meter.stop()
    assert 0.2 <= cpu["busy of client"] <= time.process_time() - began + 0.02
