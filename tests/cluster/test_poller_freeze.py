"""SIGSTOP a poller past its ZooKeeper session timeout, then SIGCONT it.

While it is frozen its session expires and its shards move to other pollers. When it
runs again it must not lease anything under its old session: "a poller that loses
its ZooKeeper session stops dispatching before another poller can own its shards".
Checked on the run records: every execution of a run of the frozen poller's shards
that started after its session expired carries the fencing epoch of an owner the
shard had after the expiry (token >> 32), never the frozen poller's old one; and no
run, nor two attempts of one fire, executed twice at once.

Two variants: a plain SIGSTOP/SIGCONT (when the process resumes, ZooKeeper has closed
its connection, so it learns of the expiry within ~0.1 s: whether it leases in that
window is a race), and the same with its link to ZooKeeper also cut (a ``ZkProxy``
frozen from the SIGSTOP until 3 s after the SIGCONT, as a pause followed by a slow
network): the poller then runs for a while before its client notices anything, which
is exactly when it must rely on its own clock.
"""

from __future__ import annotations

import signal
import time
from collections import defaultdict

import pytest

from shardcron.client.types import JobSpec, RunState, Schedule
from shardcron.coordinator.ids import shard_for
from tests.cluster.cluster_harness import (
    SHARDS,
    Checks,
    JobFeeder,
    check_acknowledged_jobs,
    check_cron_coverage,
    check_fire_attempts,
    check_no_overlap,
    measure,
    read_executions,
    utc,
    wait_cron_final,
    wait_jobs_final,
)

ZK_CUT_AFTER_RESUME = 3.0  # seconds the ZooKeeper link stays cut after SIGCONT


@pytest.mark.timeout(240)
@pytest.mark.parametrize("zk_cut", [False, True], ids=["sigstop", "sigstop-and-zk-partition"])
def test_frozen_poller_leases_nothing_after_its_session_expired(cluster, zk_cut) -> None:  # type: ignore[no-untyped-def]
    c = cluster(nodes=3, workers=2, zk_proxies=zk_cut)
    tag = "freeze+zk-cut" if zk_cut else "freeze"
    checks = Checks()
    before = c.wait_stable(workers=2)
    victim = next(n for n in sorted(c.nodes) if n != before.leader)
    api = before.leader
    owners = c.zk_owners()
    theirs = {s for s, (p, _) in owners.items() if p == victim}
    old_epoch = next(fe for p, fe in owners.values() if p == victim)
    client = c.client(api, owner="freeze")

    crons = []
    for i in range(60):
        job = client.create_job(
            JobSpec(
                name=f"cron{i}", task=c.record_task(0.3), schedule=Schedule.cron_expr("* * * * * *")
            )
        )
        if shard_for(job.id, SHARDS) in theirs:
            crons.append(job)
            if len(crons) == 4:
                break
        else:
            client.delete_job(job.id)
    assert crons, "no cron job landed in the frozen poller's shards"
    cron_from = time.time()
    feeder = JobFeeder(c, api, "freeze", interval=0.15)
    feeder.start()
    # (time, shard) -> (poller, fencing epoch) as ZooKeeper has it, sampled every 100 ms
    seen: list[tuple[float, dict[int, tuple[str, int]]]] = []

    def sample() -> None:
        try:
            seen.append((time.time(), c.zk_owners()))
        except Exception:
            pass

    # Long runs in its shards, leased by it and running when it freezes: their leases
    # run out while it is frozen, so the new owner takes them over (and one run each
    # must follow, not two).
    # (created through it: one-off jobs due soon are placed on the taking node's shards)
    via_victim = c.client(victim, owner="freeze")
    due = time.time() + 2.5
    long_jobs = []
    for i in range(60):
        job = via_victim.create_job(
            JobSpec(name=f"long{i}", task=c.record_task(4), schedule=Schedule.once_at(utc(due)))
        )
        if shard_for(job.id, SHARDS) in theirs:
            long_jobs.append(job)
            if len(long_jobs) == 3:
                break
        else:
            client.delete_job(job.id)
    assert long_jobs, "no long job landed in the frozen poller's shards"

    def long_runs_running() -> bool:
        states = [r.state for j in long_jobs for r in client.list_runs(j.id).items]
        return bool(states) and all(st == RunState.RUNNING for st in states)

    expired_at = moved_at = None
    try:
        deadline = time.time() + 15
        while time.time() < deadline and not long_runs_running():
            time.sleep(0.1)
        if zk_cut:
            c.proxies[victim].freeze()
        stopped_at = c.signal_node(victim, signal.SIGSTOP)
        while time.time() < stopped_at + 25:
            sample()
            if expired_at is None and victim not in c.zk_pollers():
                expired_at = time.time()
            current = seen[-1][1] if seen else {}
            if (
                moved_at is None
                and expired_at is not None
                and all(current.get(s, (victim,))[0] not in ("", victim) for s in theirs)
            ):
                moved_at = time.time()
            if moved_at is not None and time.time() >= max(
                moved_at + 1.5, stopped_at + c.session_timeout + 3
            ):
                break
            time.sleep(0.1)
        resumed_at = c.signal_node(victim, signal.SIGCONT)
        if zk_cut:
            while time.time() < resumed_at + ZK_CUT_AFTER_RESUME:
                sample()
                time.sleep(0.1)
            c.proxies[victim].thaw()
        until = time.time() + 8
        while time.time() < until:
            sample()
            time.sleep(0.1)
    finally:
        c.signal_node(victim, signal.SIGCONT)
        if zk_cut:
            c.proxies[victim].thaw()
        feeder.stop()
    cron_until = time.time()
    checks.expect(expired_at is not None, f"{victim}'s session never expired while frozen")
    checks.expect(moved_at is not None, f"{victim}'s shards never moved while it was frozen")
    if expired_at is not None:
        measure(
            "frozen poller: SIGSTOP -> session expired",
            expired_at - stopped_at,
            test=tag,
        )
    if moved_at is not None:
        measure(
            "frozen poller: SIGSTOP -> its shards live-owned",
            moved_at - stopped_at,
            test=tag,
        )
    frozen_for = resumed_at - stopped_at
    measure("frozen poller: frozen for", frozen_for, test=tag)

    runs_by_job = wait_jobs_final(client, [j.id for j in long_jobs] + feeder.job_ids, timeout=60)
    executions = read_executions(c.records)
    check_acknowledged_jobs(checks, runs_by_job, executions)
    # A run that finished on a worker while its poller was frozen, with the result not
    # yet recorded, is run again by the new owner after its lease runs out: at least
    # once allows that, one after the other (measured); overlap is checked below.
    repeated = check_fire_attempts(
        checks, [r for runs in runs_by_job.values() for r in runs], one_success=False
    )
    measure(
        "frozen poller: runs that succeeded twice, one after the other", repeated, "runs", test=tag
    )
    fire_of = {r.id: (r.job_id, r.fire_key) for runs in runs_by_job.values() for r in runs}
    window = (cron_from + 1, cron_until - 1)
    for job in crons:
        runs = wait_cron_final(client, job.id, window)
        check_fire_attempts(checks, runs, one_success=False)
        fire_of.update({r.id: (r.job_id, r.fire_key) for r in runs})
        check_cron_coverage(checks, job.id, runs, window)
        client.delete_job(job.id)
    check_no_overlap(checks, executions, fire_of, lambda e: e.start + c.lease_ttl)

    # The fencing rule, on the records: after the expiry, no execution in the frozen
    # poller's shards carries its old fencing epoch; each carries the epoch of an
    # owner ZooKeeper showed for that shard after the expiry.
    cutoff = expired_at if expired_at is not None else stopped_at + c.session_timeout
    legit: dict[int, set[int]] = defaultdict(set)
    for at, snapshot in seen:
        if at >= cutoff:
            for shard, (_, fe) in snapshot.items():
                legit[shard].add(fe)
    stale, unknown = [], []
    for e in executions:
        shard = shard_for(e.job_id, SHARDS)
        if shard not in theirs or e.start < cutoff:
            continue
        if e.epoch == old_epoch:
            stale.append(e)
        elif e.epoch not in legit[shard]:
            unknown.append(e)
    runs_twice = defaultdict(set)
    for e in executions:
        runs_twice[e.run_id].add(e.token)
    twice = {r: sorted(t) for r, t in runs_twice.items() if len(t) > 1}
    if stale:
        measure(
            "frozen poller: executions under its expired session",
            len(stale),
            "runs",
            tag,
        )
    checks.expect(
        not stale,
        f"{len(stale)} execution(s) in {victim}'s shards started after its session expired "
        f"under its old fencing epoch {old_epoch} (SIGCONT at +{frozen_for:.1f}s): "
        + "; ".join(
            f"run {e.run_id} token {e.token} started {e.start - resumed_at:+.2f}s after SIGCONT"
            for e in stale[:8]
        ),
    )
    checks.expect(
        not unknown,
        f"{len(unknown)} execution(s) carry a fencing epoch no owner of their shard had: "
        + "; ".join(f"run {e.run_id} epoch {e.epoch}" for e in unknown[:8]),
    )
    checks.expect(
        not twice,
        f"{len(twice)} run(s) executed under two different leases: "
        + "; ".join(f"{r} tokens {t}" for r, t in list(twice.items())[:8]),
    )
    print(
        f"frozen {victim} ({len(theirs)} shards, fencing epoch {old_epoch}) for {frozen_for:.1f}s; "
        f"session expired +{(expired_at or 0) - stopped_at:.1f}s; {len(feeder.acked)} jobs acked; "
        f"{len(crons)} cron jobs and {len(long_jobs)} long runs in its shards; "
        f"stale executions {len(stale)}; "
        f"victim log after SIGCONT:\n"
        + "\n".join(
            c.grep_logs(r"session|joined|took|released|standing still|turn failed|stored already")[
                -25:
            ]
        )
    )
    checks.verify()
