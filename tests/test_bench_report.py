"""The benchmark report says what a reader needs to read the targets off: W3's highest
rate held for every system (and which systems do not run W3), W2's time until all runs
started, what plan was run and how long it took, ratios that never read 0.0x."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pytest.importorskip("psutil")  # the report names the machine with it (the bench extra)

from bench.outcomes import Result, entries, failed_results  # noqa: E402
from bench.report import markdown, times  # noqa: E402
from bench.workloads import FULL, QUICK  # noqa: E402

STARTED = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def _w3(system: str, key: str, rate: float, p99: float, ended: int = 10) -> Result:
    return Result(
        system=system,
        workload="W3",
        n=10,
        key=key,
        config_id=key,
        rate=rate,
        lag={"p50": p99 / 2, "p95": p99, "p99": p99, "max": p99},
        completed=ended,
    )


def _w1(system: str, key: str, rate: float) -> Result:
    return Result(system=system, workload="W1", n=10, key=key, e2e_rate=rate, completed=10)


def test_every_system_states_its_highest_w3_rate_held_or_that_it_does_not_run_w3() -> None:
    results = [
        _w1("shardcron (embedded)", "shardcron", 100.0),
        _w1("celery chunks", "celery", 50.0),
        _w3("shardcron (embedded)", "shardcron", 100, 0.01),
        _w3("shardcron (embedded)", "shardcron", 1000, 0.02),
        _w3("temporal", "temporal", 100, 2.0),
        _w3("celery prefetch 1", "celery", 100, 0.1),
        _w3("celery prefetch 1", "celery", 1000, 1.5),
    ]
    text = markdown(results, STARTED, 1)
    w3 = text.split("## W3")[1]
    assert "- shardcron (embedded): highest rate held with p99 < 1 s: **1,000 jobs/s (every" in w3
    assert "- celery prefetch 1: highest rate held with p99 < 1 s: **100 jobs/s**" in w3
    assert "- temporal: highest rate held with p99 < 1 s: **none of the rates offered**" in w3
    assert "Not run on W3" in w3 and "- celery chunks\n" in w3


def test_the_json_says_each_w3_rate_and_the_highest_held() -> None:
    results = [
        _w3("celery prefetch 1", "celery", 100, 0.1),
        _w3("celery prefetch 1", "celery", 1000, 1.5),
        _w3("celery prefetch 1", "celery", 5000, 0.5),  # above a rate not held: not counted
        _w1("celery prefetch 1", "celery", 10.0),
    ]
    got = entries(results)
    w3 = [(e["rate_per_s"], e["highest_held_per_s"]) for e in got if e["workload"] == "W3"]
    assert w3 == [(100, 100), (1000, 100), (5000, 100)]
    [w1] = [e for e in got if e["workload"] == "W1"]
    assert w1["rate_per_s"] is None and w1["highest_held_per_s"] is None


def test_a_failed_w3_has_no_highest_rate_held() -> None:
    failed = failed_results("temporal", {"W3": ["dev-server"]}, {}, ["W3"], "down")
    assert [e["highest_held_per_s"] for e in entries(failed)] == [None]


def _w2(ended: int, last_start: float) -> Result:
    return Result(
        system="shardcron (embedded)",
        workload="W2",
        n=5000,
        lag={"p50": 0.1, "p95": 0.2, "p99": 0.3, "max": last_start},
        drain_s=last_start + 0.5,
        completed=ended,
    )


def test_w2_reports_the_time_until_every_run_started() -> None:
    row = [
        line for line in markdown([_w2(5000, 4.25)], STARTED, 1).splitlines() if "| 5,000" in line
    ]
    assert "all started after T" in markdown([_w2(5000, 4.25)], STARTED, 1)
    assert row == ["| shardcron (embedded) | 5,000 | 5,000 | 0.100 s | 0.200 s | 0.300 s "
                   "| 4.250 s | 4.75 s | - |"]  # fmt: skip


def test_w2_does_not_call_the_last_start_seen_all_started_when_some_never_did() -> None:
    text = markdown([_w2(4000, 4.25)], STARTED, 1)
    assert "not all (4,000 of 5,000)" in text and "4.250 s" not in text


def test_the_report_says_which_plan_ran_and_how_long_each_system_took() -> None:
    text = markdown(
        [_w1("s", "shardcron", 1.0)],
        STARTED,
        1,
        plan="full (" + FULL.describe(("W1", "W3")) + ")",
        durations={"shardcron": 125.0, "temporal": 60.0},
    )
    assert "Plan: full (W1 100,000 jobs; W3 100, 1,000, 5,000, 10,000 jobs/s, 60 s each)." in text
    assert "Duration: 3 min 05 s (shardcron 2 min 05 s, temporal 1 min 00 s)." in text
    assert QUICK.describe(("W4",)) == "W4 2,000 cron jobs x 2 minutes"


def test_ratios_far_below_one_keep_two_significant_digits() -> None:
    assert times(12.34) == "12.3x"
    assert times(0.0144) == "0.014x"
    text = markdown([_w1("shardcron (x)", "a", 10.0), _w1("celery", "b", 700.0)], STARTED, 1)
    assert "- shardcron (x) vs celery: **0.014x**" in text


def test_w3_cpu_by_process_is_given_per_rate_never_as_one_median_of_rates() -> None:
    low, high = _w3("s", "k", 100, 0.01), _w3("s", "k", 1000, 0.02)
    low.cpu_per_1000, high.cpu_per_1000 = {"total": 4.0}, {"total": 1.0}
    text = markdown([low, high], STARTED, 1)
    assert "- s at 100 jobs/s: total 4.00" in text and "- s at 1,000 jobs/s: total 1.00" in text


def test_a_storm_is_compared_only_with_a_storm_of_the_same_size() -> None:
    ours, peer, small = _w2(5000, 0.4), _w2(5000, 4.0), _w2(300, 1.0)
    peer.system, small.system = "celery", "temporal"
    ours.lag["p99"], peer.lag["p99"] = 0.3, 3.0
    small.n = small.completed = 300
    text = markdown([ours, peer, small], STARTED, 1)
    assert "- shardcron (embedded) vs celery: **10.0x**" in text
    assert "- shardcron (embedded) vs temporal: not compared (5,000 jobs vs 300)" in text


def test_a_rate_compared_with_a_capped_peer_says_both_counts() -> None:
    ours, peer = _w1("shardcron (x)", "a", 1000.0), _w1("celery", "b", 100.0)
    peer.n = 5
    text = markdown([ours, peer], STARTED, 1)
    assert "- shardcron (x) vs celery: **10.0x** (10 jobs vs 5)" in text


def test_s1_reports_every_figure_measured_and_a_dash_for_one_that_was_not() -> None:
    figures = {
        "create_per_s": 1874.4,
        "job_list_ms": 32.04,
        "base_job_list_ms": 3.0,
        "cron_fire_p99_ms": 595.0,
    }
    r = Result(
        system="shardcron (embedded)",
        workload="S1",
        n=100_000,
        key="shardcron",
        figures=figures,
        missed=3,
    )
    text = markdown([r], STARTED, 1)
    assert "## S1" in text
    assert "| jobs stored | 100,000 |" in text
    assert "| creates/s, all | 1,874/s |" in text
    assert "| `job list` first page, median | 32.0 ms (3.0 ms at 1,000) |" in text
    assert "fire error p99 | 595.0 ms |" in text
    assert "| restart after SIGKILL until `job list` is served | - |" in text
    assert "| crons' fires missed | 3 |" in text
    assert "CPU-s per 1000 jobs by process" not in text  # S1 meters none
