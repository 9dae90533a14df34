"""The run's report: a Markdown table per workload, ratios against the peers of the
same run, PNG plots, and the same figures as JSON (``bench.outcomes.entries``: stable
names for scripts), under ``bench/results/<stamp>.{md,json}``. A system that failed
twice is named with its error; the others' figures are written all the same.

With several repetitions, each figure is the median of its runs and the table says
the spread (min-max) beside it: the machines are shared and noisy, so a single
figure means little and a ratio taken across runs means less.
"""

from __future__ import annotations

import json
import platform
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import psutil

from bench.outcomes import Result, entries, spread, w3_summary
from bench.outcomes import by_rate as _by_rate
from bench.workloads import S1_BASELINE, S1_FIGURES, held, highest_held

OURS = "shardcron"


def _median(
    results: Sequence[Result], get: Callable[[Result], float | None]
) -> tuple[float, float, float] | None:
    s = spread(get(r) for r in results if not r.failed)
    return None if s is None else (s.median, s.low, s.high)


def _fmt(m: tuple[float, float, float] | None, unit: str = "", digits: int = 0) -> str:
    if m is None:
        return "-"
    med, lo, hi = m
    if lo == hi:
        return f"{med:,.{digits}f}{unit}"
    return f"{med:,.{digits}f}{unit} ({lo:,.{digits}f}-{hi:,.{digits}f})"


def machine() -> str:
    cpus = psutil.cpu_count() or 0
    mem = psutil.virtual_memory().total / 2**30
    return f"{platform.node()}: {cpus} cores, {mem:.0f} GiB, Python {platform.python_version()}"


def group(results: Sequence[Result]) -> dict[str, dict[str, list[Result]]]:
    """workload -> system -> its repetitions, in the order first met."""
    out: dict[str, dict[str, list[Result]]] = defaultdict(dict)
    for r in results:
        out[r.workload].setdefault(r.system, []).append(r)
    return out


def _ratios(
    runs: dict[str, list[Result]], get: Callable[[Result], float | None], higher: bool
) -> list[str]:
    """Each shardcron system against each peer: how many times better (median of each).
    A rate (``higher``) compares across job counts, said beside it; a lag only at the
    same count (a storm of 300 is not a storm of 5,000)."""
    lines = []
    ours = {s: rs for s, rs in runs.items() if s.startswith(OURS)}
    peers = {s: rs for s, rs in runs.items() if not s.startswith(OURS)}
    for s, rs in ours.items():
        mine = _median(rs, get)
        for p, ps in peers.items():
            theirs = _median(ps, get)
            if mine is None or theirs is None or min(mine[0], theirs[0]) <= 0:
                continue
            counts = f" ({rs[0].n:,} jobs vs {ps[0].n:,})" if rs[0].n != ps[0].n else ""
            if counts and not higher:
                lines.append(f"- {s} vs {p}: not compared{counts}")
                continue
            x = mine[0] / theirs[0] if higher else theirs[0] / mine[0]
            lines.append(f"- {s} vs {p}: **{times(x)}**{counts}")
    return lines


def times(x: float) -> str:
    """A ratio as "how many times": two significant digits below 1, so a peer ten
    times faster reads 0.1x and one fifty times faster 0.02x, never 0.0x."""
    return f"{x:,.1f}x" if x >= 1 else f"{x:.2g}x"


def markdown(
    results: Sequence[Result],
    started: datetime,
    repeat: int,
    *,
    plan: str = "",
    durations: dict[str, float] | None = None,
) -> str:
    """The report; ``plan`` says what was run (``Plan.describe``), ``durations`` how
    long each system's part took (``--systems`` key -> seconds, all rounds)."""
    lines = [
        f"# shardcron benchmark run, {started:%Y-%m-%d %H:%M} UTC",
        "",
        f"Machine: {machine()}. Each figure is the median of {repeat} run(s); "
        "(min-max) when they differ. Ratios compare medians taken in this run.",
        "",
    ]
    if plan:
        lines += [f"Plan: {plan}.", ""]
    if durations:
        took = ", ".join(f"{k} {_minutes(v)}" for k, v in durations.items())
        lines += [f"Duration: {_minutes(sum(durations.values()))} ({took}).", ""]
    everyone = list(dict.fromkeys(r.system for r in results))
    for workload, runs in group(results).items():
        lines.append(f"## {workload}")
        lines.append("")
        failed = {s: rs[0].failed for s, rs in runs.items() if all(r.failed for r in rs)}
        runs = {s: rs for s, rs in runs.items() if s not in failed}
        ratio: list[str] = []
        label = ""
        if workload == "S1":
            lines += _s1_table(runs)
        elif workload == "W3":
            lines += _w3_table(runs)
        elif workload == "W4":
            lines += _w4_table(runs)
        elif workload == "W2":
            lines += _w2_table(runs)
            ratio = _ratios(runs, lambda r: r.lag.get("p99"), higher=False)
            label = "p99 start lag, lower is better"
        else:
            lines.append(
                "| system | jobs | ended | submit acks/s | end-to-end jobs/s | drain | CPU-s / 1000 jobs |"
            )
            lines.append("|---|---|---|---|---|---|---|")
            for system, rs in runs.items():
                lines.append(
                    f"| {system} | {rs[0].n:,} | {min(r.completed for r in rs):,} | "
                    f"{_fmt(_median(rs, lambda r: r.submit_rate))} | "
                    f"{_fmt(_median(rs, lambda r: r.e2e_rate))} | "
                    f"{_fmt(_median(rs, lambda r: r.drain_s), ' s', 2)} | "
                    f"{_fmt(_median(rs, lambda r: r.cpu_per_1000.get('total')), '', 2)} |"
                )
            ratio = _ratios(runs, lambda r: r.e2e_rate, higher=True)
            label = "end-to-end jobs/s, higher is better"
        if ratio:
            lines += ["", f"Ratios ({label}):", *ratio]
        for system, why in failed.items():
            lines.append(f"- **{system}: failed** (tried twice): {why}")
        absent = [s for s in everyone if s not in runs and s not in failed]
        if absent:
            lines += ["", f"Not run on {workload} (the system does not express it here):"]
            lines += [f"- {s}" for s in absent]
        if workload != "S1":  # S1 meters no CPU: its figures are what a user waits on
            lines += _cpu_lines(runs)
        lines += ["", "Configurations and notes:", ""]
        for system, rs in runs.items():
            notes = "; ".join(sorted({r.notes for r in rs if r.notes}))
            lines.append(f"- **{system}**: {rs[0].config}" + (f". {notes}" if notes else ""))
        lines.append("")
    return "\n".join(lines)


def _cpu_lines(runs: dict[str, list[Result]]) -> list[str]:
    """CPU-s per 1000 jobs by process, per ``_cpu_rows`` row."""
    lines = ["", "CPU-s per 1000 jobs by process (median):", ""]
    for system, rs in _cpu_rows(runs):
        roles = sorted({k for r in rs for k in r.cpu_per_1000})
        parts = [
            f"{k} {_fmt(_median(rs, lambda r, k=k: r.cpu_per_1000.get(k)), '', 2)}" for k in roles
        ]
        lines.append(f"- {system}: " + ", ".join(parts))
    return lines


def _cpu_rows(runs: dict[str, list[Result]]) -> list[tuple[str, list[Result]]]:
    """Whose CPU is told apart: each system, and for W3 each of its rates (the rates are
    not repetitions of one another, so their figures never make one median)."""
    rows = []
    for system, rs in runs.items():
        if any(r.rate for r in rs):
            rows += [(f"{system} at {rate:,.0f} jobs/s", at) for rate, at in _by_rate(rs).items()]
        else:
            rows.append((system, rs))
    return rows


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


def _w2_table(runs: dict[str, list[Result]]) -> list[str]:
    """W2: start lag percentiles, the time from T until the last run started (the max
    start lag, when every run started) and until the last one ended."""
    lines = [
        "| system | jobs | ended | start lag p50 | p95 | p99 | all started after T "
        "| all done after T | CPU-s / 1000 jobs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for system, rs in runs.items():
        lag = [_median(rs, lambda r, k=k: r.lag.get(k)) for k in ("p50", "p95", "p99")]
        ended = min(r.completed for r in rs)
        whole = [r for r in rs if r.completed >= r.n]
        all_started = (
            _fmt(_median(whole, lambda r: r.lag.get("max")), " s", 3)
            if len(whole) == len(rs)
            else f"not all ({ended:,} of {rs[0].n:,})"
        )
        lines.append(
            f"| {system} | {rs[0].n:,} | {ended:,} | "
            + " | ".join(_fmt(m, " s", 3) for m in lag)
            + f" | {all_started}"
            + f" | {_fmt(_median(rs, lambda r: r.drain_s), ' s', 2)}"
            f" | {_fmt(_median(rs, lambda r: r.cpu_per_1000.get('total')), '', 2)} |"
        )
    return lines


def _w3_table(runs: dict[str, list[Result]]) -> list[str]:
    lines = [
        "| system | offered jobs/s | jobs | ended | start lag p50 | p95 | p99 | max | CPU-s / 1000 jobs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    held_lines = []
    for system, rs in runs.items():
        summary = w3_summary(rs)
        for rate, at in sorted(_by_rate(rs).items()):
            lag = [_median(at, lambda r, k=k: r.lag.get(k)) for k in ("p50", "p95", "p99", "max")]
            lines.append(
                f"| {system} | {rate:,.0f} | {at[0].n:,} | {summary[rate][1]:,} | "
                + " | ".join(_fmt(m, " s", 3) for m in lag)
                + f" | {_fmt(_median(at, lambda r: r.cpu_per_1000.get('total')), '', 2)} |"
            )
        best = highest_held(summary)
        if best is None:
            shown = "none of the rates offered"
        elif all(held(*v) for v in summary.values()):
            shown = f"{best:,.0f} jobs/s (every rate offered was held)"
        else:
            shown = f"{best:,.0f} jobs/s"
        held_lines.append(f"- {system}: highest rate held with p99 < 1 s: **{shown}**")
    return [*lines, "", *held_lines]


def _s1_table(runs: dict[str, list[Result]]) -> list[str]:
    """S1: one row per figure (``bench.workloads.S1_FIGURES``), one column per system;
    a page's figure with the jobs stored is followed by its figure at ``S1_BASELINE``."""
    lines = [
        "| with the jobs stored | " + " | ".join(runs) + " |",
        "|---|" + "---|" * len(runs),
        "| jobs stored | " + " | ".join(f"{rs[0].n:,}" for rs in runs.values()) + " |",
    ]
    for key, label, unit in S1_FIGURES:
        digits = 0 if unit in ("/s", " B") else 1
        cells = []
        for rs in runs.values():
            cell = _fmt(_median(rs, lambda r, k=key: r.figures.get(k)), unit, digits)
            base = _median(rs, lambda r, k=key: r.figures.get(f"base_{k}"))
            if base is not None:
                cell += f" ({_fmt(base, unit, digits)} at {S1_BASELINE:,})"
            cells.append(cell)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append(
        "| crons' fires missed | "
        + " | ".join(f"{max(r.missed or 0 for r in rs):,}" for rs in runs.values())
        + " |"
    )
    return lines


def _w4_table(runs: dict[str, list[Result]]) -> list[str]:
    lines = [
        "| system | fires expected | fired | missed | duplicate | error p50 | p95 | p99 | max "
        "| CPU-s / 1000 fires |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for system, rs in runs.items():
        lag = [_median(rs, lambda r, k=k: r.lag.get(k)) for k in ("p50", "p95", "p99", "max")]
        missed = max(r.missed or 0 for r in rs)
        dup = max(r.duplicates or 0 for r in rs)
        lines.append(
            f"| {system} | {rs[0].n:,} | {min(r.completed for r in rs):,} | {missed:,} | {dup:,} | "
            + " | ".join(_fmt(m, " s", 3) for m in lag)
            + f" | {_fmt(_median(rs, lambda r: r.cpu_per_1000.get('total')), '', 2)} |"
        )
    return lines


def plots(results: Sequence[Result], out: Path) -> list[Path]:
    """Throughput by system (W1) and start-lag percentiles by system (W2), as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    by = group(results)
    if "W1" in by:
        runs = by["W1"]
        names = list(runs)
        values = [(_median(rs, lambda r: r.e2e_rate) or (0.0, 0.0, 0.0))[0] for rs in runs.values()]
        fig, ax = plt.subplots(figsize=(8, 0.6 * len(names) + 1.5))
        ax.barh(names, values, color=["#2a7" if n.startswith(OURS) else "#888" for n in names])
        ax.set_xscale("log")
        ax.set_xlabel("W1 end-to-end jobs/s (log scale)")
        ax.invert_yaxis()
        fig.tight_layout()
        path = out.with_name(out.name + "-w1.png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        made.append(path)
    if "W2" in by:
        runs = by["W2"]
        keys = ["p50", "p95", "p99", "max"]
        fig, ax = plt.subplots(figsize=(8, 4))
        for system, rs in runs.items():
            ys = [
                (_median(rs, lambda r, k=k: r.lag.get(k)) or (float("nan"),) * 3)[0] for k in keys
            ]
            ax.plot(keys, ys, marker="o", label=f"{system} ({rs[0].n:,} runs)")
        ax.set_yscale("log")
        ax.set_ylabel("W2 start lag (s, log scale)")
        ax.legend(fontsize="small")
        fig.tight_layout()
        path = out.with_name(out.name + "-w2.png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        made.append(path)
    return made


def write(
    results: Sequence[Result],
    results_dir: Path,
    started: datetime,
    repeat: int,
    *,
    plan: str = "",
    durations: dict[str, float] | None = None,
) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    stem = results_dir / f"{started:%Y%m%d-%H%M%S}"
    path = stem.with_suffix(".md")
    made = plots(results, stem)
    text = markdown(results, started, repeat, plan=plan, durations=durations)
    if made:
        text += "\n" + "\n".join(f"![{p.stem}]({p.name})" for p in made) + "\n"
    path.write_text(text)
    stem.with_suffix(".json").write_text(json.dumps(entries(results), indent=1) + "\n")
    return path


def now() -> datetime:
    return datetime.now(UTC)
