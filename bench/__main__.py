"""``python -m bench`` (``make bench``): runs the workloads asked for against shardcron
and its peers, one after the other in the same run, and writes the report.

Systems run one at a time (never side by side: they would share the two cores), each
workload on a fresh instance. ``--quick`` uses job counts that finish in minutes;
the default counts are docs/benchmarks.md's (``bench.workloads``). A system that fails, to
start mostly, is tried once more and then reported as failed; the others still run.
Every runner module has ``run(workloads, n, out_dir, *, plan)`` returning ``Result``s
(workloads it cannot express are left out) and ``CONFIGS`` (workload -> configuration
names), which names the entries of a system that failed.
"""

from __future__ import annotations

import dataclasses
import importlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

import click

from bench import report
from bench.outcomes import Result, failed_results, twice
from bench.workloads import DEFAULT_WORKLOADS, FULL, QUICK, WORKLOADS, Plan

SYSTEMS = {
    "shardcron": "bench.systems.shardcron_embedded",
    "shardcron-cluster": "bench.systems.shardcron_cluster",
    "celery": "bench.systems.celery_peer",
    "temporal": "bench.systems.temporal",
}
# Peers' job counts are capped so a full run (every system) ends in under an hour on a
# 2-core machine: the Temporal dev server and Celery's one task per job are far slower
# than shardcron (their rates are in bench/results), and their W1 rate does not change
# with the count past these. W1's rates compare across counts; a storm's lag does not, so W2 is
# not compared as a ratio when counts differ (Celery's 5,000 are the quick storm's).
CAPS = {"temporal": {"W1": 300, "W2": 300}, "celery": {"W1": 20_000, "W2": 5_000}}


def _plan(quick: bool, overrides: tuple[str, ...]) -> Plan:
    base = QUICK if quick else FULL
    counts = dict(base.n)
    for item in overrides:
        workload, _, value = item.partition("=")
        if workload not in counts or not value.isdigit() or int(value) < 1:
            raise click.BadParameter(
                f"{item!r}: expected one of {sorted(counts)}=N, N >= 1", param_hint="--n"
            )
        counts[workload] = int(value)
    return dataclasses.replace(base, n=counts)


def _run_system(key: str, wanted: list[str], plan: Plan, scratch: Path) -> list[Result]:
    """One system's workloads; a system that fails (to start, mostly) is tried once more,
    then reported as failed, so the other systems' figures are still written."""
    module = importlib.import_module(SYSTEMS[key])
    capped = dataclasses.replace(plan, caps=CAPS.get(key, {}))
    n = {w: capped.jobs(w, capped=True) for w in capped.n}
    tries = iter(range(2))

    def attempt() -> list[Result]:
        return list(module.run(wanted, n, scratch / f"{key}-{next(tries)}", plan=capped))

    def retry(number: int, error: Exception) -> None:
        then = "trying once more" if number == 1 else "reported as failed"
        click.echo(f"[bench]   {key} failed ({error!r}); {then}", err=True)

    results, error = twice(attempt, retry)
    if results is None:
        return failed_results(key, module.CONFIGS, n, wanted, repr(error))
    for r in results:
        r.key = key
    return results


@click.command()
@click.option(
    "--systems",
    default="shardcron,shardcron-cluster,celery,temporal",
    show_default=True,
    help="Comma-separated: " + ", ".join(SYSTEMS) + ".",
)
@click.option(
    "--workloads",
    default=",".join(DEFAULT_WORKLOADS),
    show_default=True,
    help="Comma-separated: W1 (burst), W2 (storm), W3 (steady), W4 (cron fleet), W6 (commands),"
    " S1 (a million jobs stored: create rate, RSS, size, pages, cron fire error, restart;"
    " shardcron and shardcron-cluster only, not in the default set).",
)
@click.option("--quick", is_flag=True, help=f"Smaller workloads: {QUICK}.")
@click.option("--n", "overrides", multiple=True, help="A job count, e.g. --n W1=50000.")
@click.option("--repeat", default=1, show_default=True, type=click.IntRange(1, 9))
@click.option(
    "--results",
    "results_dir",
    default="bench/results",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
)
def main(
    systems: str,
    workloads: str,
    quick: bool,
    overrides: tuple[str, ...],
    repeat: int,
    results_dir: Path,
) -> None:
    """Benchmark shardcron against its peers; write a Markdown report and plots."""
    chosen = [s.strip() for s in systems.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SYSTEMS]
    if unknown:
        raise click.BadParameter(
            f"unknown {unknown}; known: {list(SYSTEMS)}", param_hint="--systems"
        )
    wanted = [w.strip() for w in workloads.split(",") if w.strip()]
    if not wanted or any(w not in WORKLOADS for w in wanted):
        raise click.BadParameter(f"expected some of {list(WORKLOADS)}", param_hint="--workloads")
    plan = _plan(quick, overrides)
    started = report.now()
    results: list[Result] = []
    durations = dict.fromkeys(chosen, 0.0)
    scratch = Path(tempfile.mkdtemp(prefix="shardcron-bench-"))
    try:
        for round_ in range(repeat):
            for system in chosen:
                click.echo(f"[bench] round {round_ + 1}/{repeat}: {system} {wanted}", err=True)
                began = time.monotonic()
                for r in _run_system(system, wanted, plan, scratch / str(round_)):
                    click.echo(f"[bench]   {r.system} {r.workload}: {_summary(r)}", err=True)
                    results.append(r)
                durations[system] += time.monotonic() - began
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    path = report.write(
        results,
        results_dir,
        started,
        repeat,
        plan=_plan_line(plan, quick, tuple(wanted), chosen),
        durations=durations,
    )
    click.echo(path.read_text())
    click.echo(f"[bench] report: {path}", err=True)


def _plan_line(plan: Plan, quick: bool, wanted: tuple[str, ...], chosen: list[str]) -> str:
    """What was run, for the report: the plan's sizes and the caps of the systems run."""
    line = f"{'quick' if quick else 'full'} ({plan.describe(wanted)})"
    caps = [
        f"{key} "
        + ", ".join(f"{w} at most {c:,} jobs" for w, c in CAPS[key].items() if w in wanted)
        for key in chosen
        if any(w in wanted for w in CAPS.get(key, {}))
    ]
    return line + (f"; capped: {'; '.join(caps)}" if caps else "")


def _summary(r: Result) -> str:
    if r.failed:
        return f"failed: {r.failed}"
    if r.workload == "S1":
        return ", ".join(f"{k} {v:,.1f}" for k, v in r.figures.items()) + f"; missed {r.missed}"
    if r.workload == "W3":
        lag = ", ".join(f"{k} {v:.3f}s" for k, v in r.lag.items())
        return f"{r.rate:,.0f}/s offered: {r.completed}/{r.n} ended; lag {lag}; {r.notes}"
    if r.workload == "W4":
        lag = ", ".join(f"{k} {v:.3f}s" for k, v in r.lag.items())
        return f"{r.completed}/{r.n} fired, missed {r.missed}, dup {r.duplicates}; error {lag}"
    if r.workload == "W2":
        lag = ", ".join(f"{k} {v:.3f}s" for k, v in r.lag.items())
        return f"{r.completed}/{r.n} ended; lag {lag}; {r.notes}"
    return (
        f"{r.completed}/{r.n} ended; submit {r.submit_rate or 0:,.0f}/s, "
        f"end-to-end {r.e2e_rate or 0:,.0f}/s, drain {r.drain_s or 0:.2f}s; {r.notes}"
    )


if __name__ == "__main__":
    sys.exit(main())
