"""The Celery + Redis peer as the harness runs it: every variant (``celery_redis``) on
every workload it can express — W1, W2 and W6 in ``celery_redis``, W3 and W4 (Celery
beat) in ``celery_timed`` — each on fresh servers."""

from __future__ import annotations

from pathlib import Path

from bench.common import Result
from bench.systems import celery_timed
from bench.systems.celery_redis import (
    CONFIGS,
    VARIANTS,
    missing_requirements,
    run_w1,
    run_w2,
    servers,
)
from bench.workloads import QUICK, Plan

__all__ = ["CONFIGS", "run"]


def run(
    workloads: list[str], n: dict[str, int], out_dir: Path, *, plan: Plan = QUICK
) -> list[Result]:
    """The workloads asked for on every variant that has them; one Result per run
    (W3: per rate)."""
    wanted = [w for w in workloads if w in CONFIGS]
    if not wanted:
        return []
    if missing := missing_requirements():
        raise RuntimeError("celery+redis peer cannot run, missing: " + "; ".join(missing))
    out_dir = out_dir / "celery_redis"
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    for variant in VARIANTS:
        w1_submit_rate: float | None = None
        for workload in (w for w in wanted if w in variant.workloads):
            log_dir = out_dir / f"{variant.slug}-{workload}"
            if workload == "W3":
                results += celery_timed.w3(variant, plan, out_dir, log_dir)
                continue
            with servers(variant, out_dir, log_dir) as srv:
                if workload in ("W1", "W6"):
                    result = run_w1(variant, srv, n[workload], workload)
                    if workload == "W1":
                        w1_submit_rate = result.submit_rate
                elif workload == "W4":
                    result = celery_timed.w4(variant, srv, n[workload], plan, log_dir)
                else:
                    result = run_w2(variant, srv, n[workload], w1_submit_rate)
            result.config_id = variant.config_id
            results.append(result)
    return results
