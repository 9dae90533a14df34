"""The Grafana dashboard and the Prometheus alert rules in deploy/ name only metrics a
node or a worker exports, and promtool accepts the rules and real scrapes.

The scrapes are real: a node in this process with every role and ``/metrics`` on a
free port, and a ``shardcron worker --metrics-listen`` process that runs one command
job to its end, so the labelled series that only exist once something happened
(runs by state, run durations, per-method gRPC calls) are there too. The promtool
checks need Debian's ``prometheus`` package (``make test`` installs it); without it
they are skipped.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from shardcron.client import AsyncClient
from shardcron.client.types import CommandTask, JobSpec, RunState
from shardcron.coordinator.coordination import LocalCoordination
from shardcron.coordinator.node import Node, NodeConfig
from shardcron.coordinator.sqlite.store import SqliteStore
from tests.e2e.harness import Proc, free_port
from tests.support.local_node import SHARDS

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "shardcron.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
ALERTS_TEST = DEPLOY / "prometheus" / "alerts_test.yml"
HISTOGRAM_SERIES = ("_bucket", "_count", "_sum")
WAIT = 60.0
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool absent")


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return reply.read().decode()


async def _scrape_both(data: Path) -> tuple[str, str]:
    store = SqliteStore(data / "shardcron.db", shard_count=SHARDS)
    coordination = LocalCoordination(data, shard_count=SHARDS, node_id="n1")
    config = NodeConfig(listen="127.0.0.1:0", metrics_listen="127.0.0.1:0", node_id="n1")
    node = Node(store, coordination, config)
    await node.start()
    worker_port = free_port()
    worker = Proc(
        [
            "worker",
            f"--target=127.0.0.1:{node.port}",
            f"--metrics-listen=127.0.0.1:{worker_port}",
            "--id=w1",
        ],
        data / "worker.log",
    ).start()
    try:
        async with AsyncClient(f"127.0.0.1:{node.port}", owner="alice") as client:
            job = await client.create_job(JobSpec(name="t", task=CommandTask(argv=("true",))))
            [run] = await client.wait_job_runs(job.id, count=1, timeout=WAIT)
            assert run.state == RunState.SUCCEEDED, run
        node_text = await asyncio.to_thread(scrape, node.metrics_port)
        worker_text = await asyncio.to_thread(scrape, worker_port)
    finally:
        worker.stop()
        await node.stop()
    return node_text, worker_text


@pytest.fixture(scope="module")
def scrapes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The text of one scrape of a node and one of a worker, after a run went through both."""
    node_text, worker_text = asyncio.run(_scrape_both(tmp_path_factory.mktemp("scrape")))
    return {"node": node_text, "worker": worker_text}


def exported_names(text: str) -> dict[str, str]:
    """Metric name (counters with ``_total``) -> type, from a scrape."""
    out = {}
    for family in text_string_to_metric_families(text):
        out[family.name + ("_total" if family.type == "counter" else "")] = family.type
    return out


def named_metrics(text: str) -> set[str]:
    return set(re.findall(r"\bshardcron_[a-z0-9_]*[a-z0-9]", text))


def test_the_scrapes_show_what_ran(scrapes: dict[str, str]) -> None:
    assert 'shardcron_runs_final_total{reason="NONE",state="SUCCEEDED"} 1.0' in scrapes["node"]
    assert 'shardcron_run_seconds_count{state="SUCCEEDED"} 1.0' in scrapes["node"]
    assert (
        'shardcron_grpc_requests_total{method="CreateJob",service="shardcron.v1.JobService"} 1.0'
        in scrapes["node"]
    )
    assert 'shardcron_worker_runs_total{outcome="SUCCEEDED"} 1.0' in scrapes["worker"]
    assert "shardcron_worker_pollers_connected 1.0" in scrapes["worker"]
    for text in scrapes.values():
        assert "shardcron_build_info{" in text
        assert not re.search(r"^\w+_created[{ ]", text, re.M)


@pytest.mark.parametrize("path", [DASHBOARD, ALERTS, ALERTS_TEST], ids=lambda p: p.name)
def test_every_metric_the_deploy_files_name_is_exported(
    path: Path, scrapes: dict[str, str]
) -> None:
    types = {**exported_names(scrapes["node"]), **exported_names(scrapes["worker"])}
    unknown = set()
    for name in named_metrics(path.read_text()):
        if name in types:
            continue
        base = next((name.removesuffix(s) for s in HISTOGRAM_SERIES if name.endswith(s)), "")
        if types.get(base) != "histogram":
            unknown.add(name)
    assert not unknown, f"{path.name} names metrics nobody exports: {sorted(unknown)}"


def test_the_dashboard_has_the_panels_operators_look_for() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    titles = {p["title"] for p in dashboard["panels"]}
    for wanted in (
        "Throughput",
        "Start lag percentiles",
        "Runs by final state and reason",
        "Shard lag per poller",
        "Worker slots used and free",
        "Leader",
        "Epoch",
        "Store latency p99 by operation",
        "gRPC errors by method and code",
    ):
        assert wanted in titles
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            assert named_metrics(target["expr"]), (panel["title"], target["expr"])


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["promtool", *args], input=stdin, capture_output=True, text=True, timeout=60
    )
    print(f"$ promtool {' '.join(args)}\n{done.stdout}{done.stderr}")
    return done


@needs_promtool
def test_promtool_accepts_the_alert_rules() -> None:
    checked = promtool("check", "rules", str(ALERTS))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", str(ALERTS_TEST))
    assert tested.returncode == 0, tested.stdout + tested.stderr


@needs_promtool
@pytest.mark.parametrize("who", ["node", "worker"])
def test_promtool_accepts_a_real_scrape(who: str, scrapes: dict[str, str]) -> None:
    checked = promtool("check", "metrics", stdin=scrapes[who])
    assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout + checked.stderr
