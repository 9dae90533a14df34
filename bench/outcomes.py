"""What a run yields, as data: each system's ``Result``, medians with their spread, the
stable JSON entries of ``bench/results/<stamp>.json``, and the retry-once rule for a peer
that fails to start. Standard library only, so the tests import it without the peers.

The JSON file holds one entry per (system, configuration, workload) — and for W3 per
offered rate as well — with exactly the fields of ``ENTRY_FIELDS``: ``system`` is the
``--systems`` key, ``config`` a stable name for how it was set up (for Celery one of
``celery-prefetch1``, ``celery-default``, ``celery-chunks100``), and every figure the
median over the repetitions, ``null`` where it does not apply or the system failed.
Two fields are W3's alone (``null`` elsewhere): ``rate_per_s`` (the offered arrival rate)
and ``highest_held_per_s`` (that system configuration's highest rate held with start
lag p99 < 1 s, ``bench.workloads.highest_held``; the same on each of its W3 entries).
For W2, ``lag_max_s`` is the time from T until the last run started: "all started
after T" when ``ended`` equals ``jobs``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from bench.workloads import highest_held

T = TypeVar("T")

ENTRY_FIELDS = (
    "system",
    "config",
    "workload",
    "jobs",
    "ended",
    "submit_per_s",
    "e2e_per_s",
    "lag_p50_s",
    "lag_p95_s",
    "lag_p99_s",
    "lag_max_s",
    "cpu_s_per_1000",
    "rate_per_s",
    "highest_held_per_s",
)


@dataclass(slots=True)
class Result:
    system: str  # e.g. "shardcron (embedded)", "celery+redis prefork x2, prefetch 1"
    workload: str  # "W1", "W2", ...
    n: int  # jobs (W4: fires expected)
    config: str = ""  # how the system was configured, one line
    config_id: str = ""  # the same, as a stable name: "embedded", "celery-prefetch1", ...
    key: str = ""  # the --systems key that ran it: "shardcron", "celery", ...
    submit_rate: float | None = None  # acknowledged submits per second (W3: over the open loop)
    e2e_rate: float | None = None  # jobs completed per second, first submit to last completion
    drain_s: float | None = None  # last acknowledged submit to last completion
    lag: dict[str, float] = field(default_factory=dict)  # start lag (s): p50, p95, p99, max
    cpu_per_1000: dict[str, float] = field(default_factory=dict)  # role -> CPU-s per 1000 jobs
    completed: int = 0  # jobs seen completed (== n unless something was lost or timed out)
    rate: float | None = None  # W3: the offered arrival rate (jobs/s)
    missed: int | None = None  # W4: fires expected that never ran
    duplicates: int | None = None  # W4: fires that ran more than once
    failed: str = ""  # why the system could not be measured ("" when it was)
    figures: dict[str, float] = field(default_factory=dict)  # S1: its figures by name
    notes: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Spread:
    median: float
    low: float
    high: float


def spread(values: Iterable[float | None]) -> Spread | None:
    """The median of the values that are not None, with their min and max; None if none."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return Spread(median=statistics.median(present), low=min(present), high=max(present))


def _median(values: Iterable[float | None]) -> float | None:
    s = spread(values)
    return None if s is None else s.median


def by_rate(results: Iterable[Result]) -> dict[float, list[Result]]:
    """W3 results by offered rate (their repetitions together)."""
    out: dict[float, list[Result]] = {}
    for r in results:
        out.setdefault(r.rate or 0.0, []).append(r)
    return out


def w3_summary(results: Iterable[Result]) -> dict[float, tuple[float | None, int, int]]:
    """One system configuration's W3 results as ``highest_held`` takes them: rate ->
    (median start lag p99, fewest jobs any repetition saw end, jobs); failed runs left out."""
    summary = {}
    for rate, at in by_rate(r for r in results if not r.failed).items():
        summary[rate] = (
            _median(r.lag.get("p99") for r in at),
            min(r.completed for r in at),
            at[0].n,
        )
    return summary


def entries(results: Sequence[Result]) -> list[dict[str, Any]]:
    """One JSON entry per (system key, config, workload, W3 rate), repetitions folded into
    medians; ``ended`` is the fewest any repetition saw end."""
    groups: dict[tuple[str, str, str, float | None], list[Result]] = {}
    for r in results:
        groups.setdefault((r.key, r.config_id, r.workload, r.rate), []).append(r)
    best: dict[tuple[str, str], float | None] = {}
    for key, config_id, workload, _rate in groups:
        if workload == "W3" and (key, config_id) not in best:
            mine = [
                r for r in results if (r.key, r.config_id, r.workload) == (key, config_id, "W3")
            ]
            best[(key, config_id)] = highest_held(w3_summary(mine))
    out = []
    for (key, config_id, workload, rate), rs in groups.items():
        measured = [r for r in rs if not r.failed]
        out.append(
            {
                "system": key,
                "config": config_id,
                "workload": workload,
                "jobs": rs[0].n,
                "ended": min(r.completed for r in measured) if measured else 0,
                "submit_per_s": _median(r.submit_rate for r in measured),
                "e2e_per_s": _median(r.e2e_rate for r in measured),
                "lag_p50_s": _median(r.lag.get("p50") for r in measured),
                "lag_p95_s": _median(r.lag.get("p95") for r in measured),
                "lag_p99_s": _median(r.lag.get("p99") for r in measured),
                "lag_max_s": _median(r.lag.get("max") for r in measured),
                "cpu_s_per_1000": _median(r.cpu_per_1000.get("total") for r in measured),
                "rate_per_s": rate if workload == "W3" else None,
                "highest_held_per_s": best.get((key, config_id)) if workload == "W3" else None,
            }
        )
    return out


def failed_results(
    key: str, configs: dict[str, list[str]], n: dict[str, int], workloads: Sequence[str], why: str
) -> list[Result]:
    """What a system that could not be measured reports: one empty Result per
    configuration of each workload asked for (``configs``: workload -> config names)."""
    return [
        Result(
            system=key,
            workload=w,
            n=n.get(w, 0),
            key=key,
            config_id=c,
            failed=why,
            notes=f"failed: {why}",
        )
        for w in workloads
        for c in configs.get(w, [])
    ]


def twice(
    attempt: Callable[[], T], on_failure: Callable[[int, Exception], None]
) -> tuple[T | None, Exception | None]:
    """Runs ``attempt``; if it raises, tells ``on_failure`` (attempt number, error) and runs
    it once more. Returns (its value, None), or (None, the second error)."""
    for number in (1, 2):
        try:
            return attempt(), None
        except Exception as e:  # a peer that failed to start: any error, reported
            on_failure(number, e)
            if number == 2:
                return None, e
    raise AssertionError("unreachable")
