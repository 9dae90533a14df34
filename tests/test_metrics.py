"""What a node and a worker export to Prometheus, and the README's table of it.

The README's metrics table is compared with the registries themselves (names, types,
labels, help texts), so it cannot drift from the code. The counting rules (one count
per skipped fire, ``reason="NONE"`` for a success, no ``_created`` series) are checked
on the real ``Metrics`` and the poller's real rules and ``RunTable``.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import shardcron
from shardcron.client.schedule import next_fire
from shardcron.client.types import (
    ConcurrencyPolicy,
    HandlerTask,
    JobSpec,
    JobState,
    OverlapPolicy,
    RunReason,
    RunState,
    Schedule,
)
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.poller import fires
from shardcron.coordinator.poller.table import Phase
from shardcron.worker import Worker
from shardcron.worker.metrics import worker_registry
from tests.support.held_runs import Held, worker
from tests.support.store_builders import SHARDS, make_job, make_run

README = Path(__file__).resolve().parents[1] / "README.md"
TABLE_START = "<!-- metrics table: checked by tests/test_metrics.py -->"
TABLE_END = "<!-- end of metrics table -->"
HISTOGRAM_LABELS = {"le", "quantile"}


def families(registry: CollectorRegistry) -> dict[str, tuple[str, str, frozenset[str]]]:
    """name -> (type, help, label names) of every family a scrape of ``registry`` shows.
    Label names of a family with no series yet come from the metric object."""
    out: dict[str, tuple[str, str, frozenset[str]]] = {}
    declared: dict[str, tuple[str, ...]] = {}
    for collector in list(registry._collector_to_names):  # noqa: SLF001
        names = getattr(collector, "_labelnames", None)
        if names is not None:
            declared[collector._name] = tuple(names)  # noqa: SLF001
        declared.update(getattr(collector, "label_names", {}))  # run_metrics.RunCounts
    text = generate_latest(registry).decode()
    for family in text_string_to_metric_families(text):
        labels = {k for s in family.samples for k in s.labels} - HISTOGRAM_LABELS
        labels |= set(declared.get(family.name, ()))
        name = family.name + ("_total" if family.type == "counter" else "")
        out[name] = (family.type, family.documentation, frozenset(labels))
    return out


Row = tuple[str, str, frozenset[str], str]  # type, help, labels, exported by


def exported() -> dict[str, Row]:
    """Every family a node or a worker exports, and which of them does (a dev node,
    with its workers in process, exports both)."""
    worker = Worker("127.0.0.1:1")
    node_families = families(Metrics().registry)
    worker_families = families(worker_registry(lambda: [worker]))
    out: dict[str, Row] = {}
    for name in node_families.keys() | worker_families.keys():
        kind, meaning, labels = node_families.get(name) or worker_families[name]
        by = [who for who, f in (("node", node_families), ("worker", worker_families)) if name in f]
        out[name] = (kind, meaning, labels, ", ".join(by))
    return out


def readme_table() -> dict[str, Row]:
    text = README.read_text()
    assert TABLE_START in text and TABLE_END in text, "README has no metrics table"
    body = text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0]
    rows: dict[str, Row] = {}
    for line in body.strip().splitlines()[2:]:  # after the header and its rule
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name, kind, labels, by, meaning = (c.strip("`") for c in cells)
        label_set = frozenset(x.strip(" `") for x in labels.split(",") if x.strip(" `"))
        rows[name] = (kind, meaning, label_set, by)
    return rows


def table_markdown(rows: dict[str, Row]) -> str:
    lines = ["| metric | type | labels | exported by | meaning |", "|---|---|---|---|---|"]
    for name, (kind, meaning, labels, by) in sorted(rows.items()):
        label_text = ", ".join(f"`{x}`" for x in sorted(labels))
        lines.append(f"| `{name}` | {kind} | {label_text} | {by} | {meaning} |")
    return "\n".join(lines)


def test_the_readme_lists_every_metric_as_exported() -> None:
    want = exported()
    assert readme_table() == want, (
        "README.md's metrics table differs from what is exported (python -m tests.test_metrics "
        "rewrites it); the table should read:\n" + table_markdown(want)
    )


def test_no_created_series_are_exported() -> None:
    metrics = Metrics()
    metrics.runs_leased.inc()
    metrics.schedule_lag.observe(0.1)
    text = generate_latest(metrics.registry).decode()
    assert "shardcron_runs_leased_total 1.0" in text
    assert not re.search(r"^\w+_created[{ ]", text, re.M), text


def test_build_info_names_the_version_and_python() -> None:
    for registry in (Metrics().registry, worker_registry(lambda: [])):
        info = [
            s.labels
            for f in text_string_to_metric_families(generate_latest(registry).decode())
            for s in f.samples
            if s.name == "shardcron_build_info"
        ]
        assert len(info) == 1
        assert info[0]["version"] == shardcron.__version__
        assert re.fullmatch(r"3\.\d+\.\d+.*", info[0]["python"])


def test_a_success_is_counted_with_reason_none_and_its_duration() -> None:
    metrics = Metrics()
    job = make_job()
    start = utcnow()
    run = make_run(
        job,
        state=RunState.SUCCEEDED,
        started_at=start,
        ended_at=start + timedelta(seconds=2),
    )
    metrics.run_ended(run)
    value = metrics.registry.get_sample_value
    assert value("shardcron_runs_final_total", {"state": "SUCCEEDED", "reason": "NONE"}) == 1
    assert value("shardcron_run_seconds_count", {"state": "SUCCEEDED"}) == 1
    assert value("shardcron_run_seconds_sum", {"state": "SUCCEEDED"}) == 2


def test_skipped_and_missed_are_counted_apart() -> None:
    metrics = Metrics()
    job = make_job()
    metrics.run_ended(make_run(job, state=RunState.SKIPPED, reason=RunReason.PAUSED))
    metrics.run_ended(make_run(job, state=RunState.MISSED, reason=RunReason.DEADLINE))
    value = metrics.registry.get_sample_value
    assert value("shardcron_fires_skipped_total", {"reason": "PAUSED"}) == 1
    assert value("shardcron_fires_skipped_total", {"reason": "DEADLINE"}) is None
    assert value("shardcron_fires_missed_total", {"reason": "DEADLINE"}) == 1
    assert value("shardcron_run_seconds_count", {"state": "MISSED"}) is None


def test_a_dead_letter_is_counted_by_reason_and_a_retried_failure_is_not() -> None:
    metrics = Metrics()
    job = make_job()
    failed = make_run(job, state=RunState.FAILED, reason=RunReason.NON_ZERO_EXIT)
    metrics.dead_lettered(failed)
    metrics.dead_lettered(dataclasses.replace(failed, dead_letter=True))
    value = metrics.registry.get_sample_value
    assert value("shardcron_dead_letters_total", {"reason": "NON_ZERO_EXIT"}) == 1


def test_an_overlap_skip_is_counted_once_regression() -> None:
    """A fire skipped under FORBID (a run of its job still going) was counted twice in
    shardcron_fires_skipped_total: once where the run ended, once more where admission
    said SKIP."""
    metrics = Metrics()
    h = Held(metrics=metrics)
    spec = JobSpec(
        name="every-minute",
        task=HandlerTask(name="noop"),
        schedule=Schedule.cron_expr("* * * * *"),
        concurrency=ConcurrencyPolicy(overlap=OverlapPolicy.FORBID),
    )
    now = utcnow()
    job = dataclasses.replace(make_job(spec=spec), schedule_version=1)
    running = dataclasses.replace(
        make_run(job, due_at=now - timedelta(minutes=1), fire_key="a", schedule_version=1),
        state=RunState.LEASED,
        worker_id="w1",
        lease_token=7,
    )
    orphan = h.table.adopt(running, job, taken_at=now, now=now)
    # claimed by its worker: the run really goes
    assert h.table.renew(orphan, worker("w1"), 7, now, active=True)[1]
    due = make_run(job, due_at=now, fire_key="b", schedule_version=1)
    slot = h.due(due, job)
    h.table.cache_job(dataclasses.replace(job, next_fire_key="b", next_fire_at=now))
    h.due_rules.trigger(slot, now, h.turn)
    assert h.turn.runs[due.id].state == RunState.SKIPPED
    assert h.turn.runs[due.id].reason == RunReason.OVERLAP
    value = metrics.registry.get_sample_value
    assert value("shardcron_fires_skipped_total", {"reason": "OVERLAP"}) == 1
    assert value("shardcron_runs_final_total", {"state": "SKIPPED", "reason": "OVERLAP"}) == 1


def test_a_fire_its_own_rules_skip_is_counted_as_a_run_that_ended_once() -> None:
    """Issue 33 (probe 2 of its analysis): a fire of a paused job, skipped by its own
    rules, was counted in shardcron_fires_skipped_total but never in
    shardcron_runs_final_total, unlike every other end. Its end is counted as any
    end is, once in each."""
    metrics = Metrics()
    h = Held(metrics=metrics)
    schedule = Schedule.cron_expr("* * * * *")
    now = utcnow()
    fire = next_fire(schedule, now - timedelta(minutes=1))
    assert fire is not None
    base = make_job(spec=JobSpec(name="paused", task=HandlerTask(name="noop"), schedule=schedule))
    job = dataclasses.replace(
        base,
        state=JobState.PAUSED,
        schedule_version=1,
        next_fire_at=fire.at,
        next_fire_key=fire.key,
    )
    slot = h.due(fires.make_run(job, fire, shard_count=SHARDS, now=fire.at), job)
    h.table.cache_job(job)
    h.due_rules.trigger(slot, fire.at, h.turn)
    assert h.ended(slot).reason == RunReason.PAUSED
    value = metrics.registry.get_sample_value
    assert value("shardcron_fires_skipped_total", {"reason": "PAUSED"}) == 1
    assert value("shardcron_runs_final_total", {"state": "SKIPPED", "reason": "PAUSED"}) == 1


def held_in(h: Held, phase: Phase, now: datetime, age: float, key: str) -> None:
    """A run of a job due ``age`` seconds before ``now``, held in ``phase``."""
    job = make_job()
    run = make_run(job, due_at=now - timedelta(seconds=age), fire_key=key)
    if phase == Phase.WAITING:
        h.table.hold(run, job)
    elif phase == Phase.LEASED:
        leased = dataclasses.replace(run, state=RunState.LEASED, worker_id="w", lease_token=1)
        h.table.adopt(leased, job, taken_at=now, now=now)
    elif phase == Phase.READY:
        h.table.make_ready(h.due(run, job))
    else:
        h.table.queue(h.due(run, job))
    h.table.check()


def test_shard_lag_is_the_age_of_the_oldest_due_run_not_on_a_worker() -> None:
    metrics = Metrics()
    h = Held(metrics=metrics)
    now = utcnow()
    held_in(h, Phase.READY, now, 10, "a")
    held_in(h, Phase.LEASED, now, 60, "b")
    h.leasing.count_waiting([], now)
    assert metrics.registry.get_sample_value("shardcron_shard_lag_seconds") == 10


@pytest.mark.parametrize(("phase", "lag"), [(Phase.WAITING, 30), (Phase.BLOCKED, 0)])
def test_shard_lag_counts_a_run_the_poller_is_behind_on_not_one_its_concurrency_limit_holds(
    phase: Phase, lag: float
) -> None:
    """A due run not triggered yet is lag; one its job's concurrency limit holds back
    (a queue behind a long run, by the job's policy) is not: it would page the operator
    about a healthy scheduler."""
    metrics = Metrics()
    h = Held(metrics=metrics)
    now = utcnow()
    held_in(h, phase, now, 30, "a")
    h.leasing.count_waiting([], now)
    assert metrics.registry.get_sample_value("shardcron_shard_lag_seconds") == lag


def write_readme_table() -> None:
    """Rewrites README.md's metrics table from the registries (``python -m tests.test_metrics``)."""
    text = README.read_text()
    head, rest = text.split(TABLE_START, 1)
    tail = rest.split(TABLE_END, 1)[1]
    README.write_text(f"{head}{TABLE_START}\n{table_markdown(exported())}\n{TABLE_END}{tail}")


if __name__ == "__main__":
    write_readme_table()


def test_run_counts_place_values_in_buckets_as_prometheus_client_does() -> None:
    # The node's per-run histograms are kept in plain numbers (run_metrics); a scrape
    # must read what a prometheus-client Histogram fed the same values would.
    from prometheus_client import Histogram

    from shardcron.coordinator.metrics import LAG_BUCKETS

    values = [0.0, 0.001, 0.0011, 0.0025, 0.02, 0.1, 0.25000001, 1, 59.9, 300, 301, 1e9]
    reference = CollectorRegistry()
    histogram = Histogram(
        "shardcron_schedule_lag_seconds", "x", buckets=LAG_BUCKETS, registry=reference
    )
    metrics = Metrics()
    for v in values:
        histogram.observe(v)
        metrics.schedule_lag.observe(v)

    def samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
        text = generate_latest(registry).decode()
        return {
            (s.name, s.labels.get("le", "")): s.value
            for f in text_string_to_metric_families(text)
            if f.name == "shardcron_schedule_lag_seconds"
            for s in f.samples
        }

    got, want = samples(metrics.registry), samples(reference)
    assert got == want
    assert got[("shardcron_schedule_lag_seconds_count", "")] == len(values)
