"""The scale model's arithmetic (``bench/scale_model.py``): costs scale with the rate,
hosts divide it, the shard count bounds the nodes that help, a limit reached is named,
and the measured figures it starts from are the ones the reports it cites hold."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from bench import scale_model as m

REPO = Path(__file__).resolve().parent.parent
DEP = m.Deployment()


def test_a_doubled_rate_needs_twice_the_workers_and_cassandra_cores() -> None:
    one = m.size(2_000, m.LATEST, DEP)
    two = m.size(4_000, m.LATEST, DEP)
    assert two.handler_worker_cores == pytest.approx(2 * one.handler_worker_cores)
    assert two.command_worker_cores == pytest.approx(2 * one.command_worker_cores)
    assert two.cassandra_cores == pytest.approx(2 * one.cassandra_cores)
    assert two.node_cores == pytest.approx(2 * one.node_cores)
    assert two.due_partition_rows == pytest.approx(2 * one.due_partition_rows)


def test_worker_cores_are_rate_times_cpu_over_utilisation() -> None:
    costs = replace(m.LATEST, handler_worker_ms=1.0)
    dep = replace(DEP, utilisation=0.5)
    # 1,000 jobs/s at 1 ms each is one core busy; at 50% of a core, two.
    assert m.size(1_000, costs, dep).handler_worker_cores == pytest.approx(2.0)


def test_cassandra_counts_every_replica_of_a_write_and_a_quorum_of_reads() -> None:
    costs = replace(m.LATEST, writes=6.0, reads=1.0, cassandra_ms=0.7)
    assert costs.cassandra_op_ms == pytest.approx(0.1)
    assert m.replica_ops(costs, replace(DEP, replication=3, read_replicas=2)) == pytest.approx(20)
    assert m.replica_ops(costs, replace(DEP, replication=1, read_replicas=1)) == pytest.approx(7)


def test_cassandra_never_has_fewer_hosts_than_replicas() -> None:
    assert m.size(1, m.LATEST, replace(DEP, replication=3)).cassandra_nodes == 3
    many = m.size(100_000, m.LATEST, DEP)
    assert many.cassandra_nodes == pytest.approx(
        many.cassandra_cores / DEP.cassandra_host_cores, abs=1
    )
    assert many.cassandra_nodes > 3


def test_nodes_are_the_fewest_whose_busiest_loop_fits() -> None:
    rate = 5_000
    n = m.nodes_needed(rate, m.LATEST, DEP)
    assert n is not None
    cap = DEP.loop_cores * DEP.utilisation
    assert m.busiest_loop_load(rate, n, m.LATEST, DEP) <= cap
    assert m.busiest_loop_load(rate, n - 1, m.LATEST, DEP) > cap


def test_uneven_shards_load_the_busiest_poller_more() -> None:
    dep = replace(DEP, shard_count=64, poller_share=1.0)
    # 64 shards on 7 pollers: the busiest holds 10, not 64 / 7.
    busiest = m.busiest_loop_load(7_000, 7, m.LATEST, dep)
    even = 7_000 * m.LATEST.node_ms / 1000 / 7
    assert busiest == pytest.approx(even * 10 / (64 / 7))


def test_nodes_past_the_shard_count_take_only_the_api_share() -> None:
    dep = replace(DEP, shard_count=4, poller_share=0.5)
    at_shards = m.busiest_loop_load(1_000, 4, m.LATEST, dep)
    beyond = m.busiest_loop_load(1_000, 8, m.LATEST, dep)
    poller_part = 1_000 * m.LATEST.node_ms / 1000 * 0.5 / 4
    assert beyond - poller_part == pytest.approx((at_shards - poller_part) / 2)


def test_a_rate_past_the_shard_ceiling_has_no_node_count_and_names_the_limit() -> None:
    dep = replace(DEP, shard_count=4)
    ceiling = m.shard_ceiling(m.LATEST, dep)
    below = m.size(ceiling * 0.9, m.LATEST, dep)
    above = m.size(ceiling * 1.1, m.LATEST, dep)
    assert below.nodes is not None
    assert above.nodes is None
    assert above.first_rate_limit.name == "shards per poller"
    assert above.first_rate_limit.reached
    assert not below.first_rate_limit.reached


def test_more_shards_raise_the_ceiling_in_proportion() -> None:
    assert m.shard_ceiling(m.LATEST, replace(DEP, shard_count=128)) == pytest.approx(
        2 * m.shard_ceiling(m.LATEST, replace(DEP, shard_count=64))
    )


def test_due_partition_rows_are_a_bucket_of_one_shards_runs() -> None:
    s = m.size(10_000, m.LATEST, replace(DEP, shard_count=64, bucket_seconds=60))
    assert s.due_partition_rows == pytest.approx(10_000 * 60 / 64)
    due = next(lim for lim in s.limits if lim.name == "due_runs partition")
    assert due.headroom == pytest.approx(DEP.partition_limit_bytes / (9_375 * 104))
    assert not due.reached


def test_an_owners_job_index_is_reached_at_100_million_a_day_and_named_first() -> None:
    s = m.size(100e6 / m.DAY_S, m.LATEST, DEP, daily=100e6)
    assert s.first_limit.name == "jobs_by_owner partition"
    assert s.first_limit.reached
    spread = m.size(100e6 / m.DAY_S, m.LATEST, replace(DEP, owners=100_000), daily=100e6)
    owner = next(lim for lim in spread.limits if lim.name == "jobs_by_owner partition")
    assert not owner.reached


def test_an_every_second_job_outgrows_its_runs_partition_an_every_minute_one_does_not() -> None:
    def runs_limit(interval: float) -> m.Limit:
        s = m.size(1_000, m.LATEST, replace(DEP, cron_interval_s=interval))
        return next(lim for lim in s.limits if lim.name == "runs partition of a frequent job")

    assert runs_limit(1.0).reached
    assert not runs_limit(60.0).reached


def test_zookeeper_writes_to_add_a_node_follow_the_shards_it_takes() -> None:
    dep = replace(DEP, shard_count=64)
    # The second poller takes 32 shards: each an owner node deleted and one created,
    # beside its join (2) and the assignment (1).
    assert m.zk_writes_to_add_node(1, dep) == 3 + 2 * 32
    assert m.zk_writes_to_add_node(63, dep) == 3 + 2 * 1
    big = replace(DEP, shard_count=100_000)
    s = m.size(1_000, m.LATEST, big)
    zk = next(lim for lim in s.limits if lim.name == "ZooKeeper assignment node")
    assert zk.reached


def test_stored_runs_stay_level_and_jobs_grow() -> None:
    runs, jobs_a_day = m.stored_bytes(1e6, m.LATEST, replace(DEP, replication=1))
    per_run = 266 * 30 + 78 * 31 + 104 * 7
    assert runs == pytest.approx(1e6 * per_run)
    assert jobs_a_day == pytest.approx(1e6 * (862 + 42))


@pytest.mark.parametrize(
    ("figures", "report", "section", "expected"),
    [
        (
            m.LATEST,
            "bench/results/20261128-012051.md",
            "## W1",
            "cassandra 0.60, client 0.03, nodes 0.69, total 1.44, workers 0.11, zookeeper 0.00",
        ),
        (
            m.FASTER,
            "bench/results/20261127-113837.md",
            "## W1",
            "cassandra 0.41, client 0.01, nodes 0.24, total 0.70, workers 0.04, zookeeper 0.01",
        ),
    ],
)
def test_the_measured_figures_are_the_cited_reports(
    figures: m.Costs, report: str, section: str, expected: str
) -> None:
    text = (REPO / report).read_text()
    w1 = text.split(section, 1)[1].split("\n## ", 1)[0]
    line = next(x for x in w1.splitlines() if "shardcron (ZooKeeper + Cassandra): cassandra" in x)
    assert expected in line
    found = dict(re.findall(r"(\w+) ([0-9.]+)", line.split(":", 1)[1]))
    assert float(found["nodes"]) == figures.node_ms
    assert float(found["cassandra"]) == figures.cassandra_ms
    assert float(found["workers"]) == figures.handler_worker_ms
    assert float(found["zookeeper"]) == figures.zookeeper_ms


def test_the_command_worker_figure_is_the_cited_w6_run() -> None:
    text = (REPO / "bench/results/20261128-085847.md").read_text()
    assert "shardcron (embedded): client 0.04 (0.03-0.05), scheduler 0.62" in text
    assert "workers 2.14 (1.93-2.93)" in text
    assert m.LATEST.command_worker_ms == 2.14


def test_the_store_budget_is_architectures_w1_table() -> None:
    text = (REPO / "ARCHITECTURE.md").read_text()
    w1 = text.split("**W1: a one-off job**", 1)[1].split("**A cron**", 1)[0]
    writes = 0.0
    for table in (
        "runs",
        "runs_by_id",
        "jobs",
        "due_runs",
        "shard_buckets",
        "jobs_by_owner",
        "job_counts",
    ):
        cells = next(x for x in w1.splitlines() if x.startswith(f"| `{table}` |")).split("|")
        writes += float(cells[2].strip().lstrip("≤ "))
    assert m.LATEST.writes == pytest.approx(writes)


def test_main_prints_the_table_and_its_sources(capsys: pytest.CaptureFixture[str]) -> None:
    m.main(["--rate", "1000", "--rate", "20000"])
    out = capsys.readouterr().out
    assert "A model, not a measurement" in out
    assert "bench/results/20261128-012051.md" in out
    assert "| nodes (api + poller) |" in out
    assert "20,000 jobs/s" in out


def test_the_readme_table_is_the_models_output() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Scaling out", 1)[1].split("\n## ", 1)[0]
    sizes = [m.size(r, m.LATEST, DEP, daily=d) for r, d in m.DEFAULT_SCENARIOS]

    def row(name: str) -> list[str]:
        line = next(x for x in section.splitlines() if x.startswith(f"| {name} |"))
        return [c.strip() for c in line.split("|")[2:-1]]

    assert row("nodes (api + poller)") == [str(s.nodes) for s in sizes]
    assert row("Cassandra hosts (cores)") == [
        f"{s.cassandra_nodes} ({s.cassandra_cores:.1f})" for s in sizes
    ]
    assert row("worker cores, `true` command") == [f"{s.command_worker_cores:.1f}" for s in sizes]
    assert row("ZooKeeper writes to add a node") == [str(s.zk_writes_to_add_a_node) for s in sizes]
