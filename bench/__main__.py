"""``python -m bench`` (``make bench``): runs the workloads asked for against shardcron
and its peers, one after the other in the same run, and writes the report.

Systems run one at a time (never side by side: they would share the two cores), each
workload on a fresh instance. ``--quick`` uses job counts that finish in minutes;
the default counts are BENCHMARKS.md's.
"""

from __future__ import annotations

import importlib
import shutil
import sys
import tempfile
from pathlib import Path

import click

from bench import report
from bench.common import Result

SYSTEMS = {
    "shardcron": "bench.systems.shardcron_embedded",
    "shardcron-cluster": "bench.systems.shardcron_cluster",
    "celery": "bench.systems.celery_redis",
    "temporal": "bench.systems.temporal",
}
WORKLOADS = ("W1", "W2")
FULL = {"W1": 100_000, "W2": 50_000}
QUICK = {"W1": 10_000, "W2": 5_000}
# The Temporal dev server runs about 10 jobs/s here: its counts are capped so a run
# ends in minutes; its figures are rates and percentiles, comparable all the same.
CAP = {"temporal": 300}


def _counts(quick: bool, overrides: tuple[str, ...]) -> dict[str, int]:
    counts = dict(QUICK if quick else FULL)
    for item in overrides:
        workload, _, value = item.partition("=")
        if workload not in WORKLOADS or not value.isdigit() or int(value) < 1:
            raise click.BadParameter(f"{item!r}: expected W1=N or W2=N, N >= 1", param_hint="--n")
        counts[workload] = int(value)
    return counts


@click.command()
@click.option(
    "--systems",
    default="shardcron,shardcron-cluster,celery,temporal",
    show_default=True,
    help="Comma-separated: " + ", ".join(SYSTEMS) + ".",
)
@click.option(
    "--workloads",
    default="W1,W2",
    show_default=True,
    help="Comma-separated: W1 (burst), W2 (storm).",
)
@click.option("--quick", is_flag=True, help=f"Smaller job counts: {QUICK}.")
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
    counts = _counts(quick, overrides)
    started = report.now()
    results: list[Result] = []
    scratch = Path(tempfile.mkdtemp(prefix="shardcron-bench-"))
    try:
        for round_ in range(repeat):
            for system in chosen:
                module = importlib.import_module(SYSTEMS[system])
                n = {w: min(c, CAP.get(system, c)) for w, c in counts.items()}
                click.echo(f"[bench] round {round_ + 1}/{repeat}: {system} {wanted} {n}", err=True)
                for r in module.run(wanted, n, scratch / f"{system}-{round_}"):
                    click.echo(f"[bench]   {r.system} {r.workload}: {_summary(r)}", err=True)
                    results.append(r)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    path = report.write(results, results_dir, started, repeat)
    click.echo(path.read_text())
    click.echo(f"[bench] report: {path}", err=True)


def _summary(r: Result) -> str:
    if r.workload == "W2":
        lag = ", ".join(f"{k} {v:.3f}s" for k, v in r.lag.items())
        return f"{r.completed}/{r.n} ended; lag {lag}; {r.notes}"
    return (
        f"{r.completed}/{r.n} ended; submit {r.submit_rate or 0:,.0f}/s, "
        f"end-to-end {r.e2e_rate or 0:,.0f}/s, drain {r.drain_s or 0:.2f}s; {r.notes}"
    )


if __name__ == "__main__":
    sys.exit(main())
