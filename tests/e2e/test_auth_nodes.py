"""Two ``shardcron node`` processes with an auth file on a real ZooKeeper and Cassandra,
calling each other with the node token (issue 12, item 5): hints, cancels and pollers'
status cross between them through PollerService, which serves only the node role, and a
worker process of every owner runs what either poller leases.

(The multi-process cluster suite, ``tests/cluster``, runs with tokens too.)
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from shardcron.client.errors import ShardcronError
from shardcron.client.sdk import Client
from shardcron.client.types import HandlerTask, JobSpec, RunState, Schedule
from tests.e2e.harness import Proc, free_port, wait_healthy
from tests.support.auth import TOKENS, auth_file_text
from tests.support.cassandra import cassandra_node
from tests.support.store_builders import CONTRACT_CONFIG
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e
WAIT = 60.0
SHARDS = CONTRACT_CONFIG["shard_count"]
NOOP = JobSpec(name="j", task=HandlerTask(name="noop"), schedule=Schedule.immediate())
# a job of many fires keeps the shard its id drew (one of one fire due soon is placed on
# the creating node's shards): its first run, due now, is on either node's shards
HOURLY = NOOP.replace(schedule=Schedule.every(timedelta(hours=1)))


@pytest.fixture
def nodes(tmp_path: Path, zk_hosts: str) -> Iterator[list[str]]:
    """Two nodes (every role) and a worker of every owner; yields the nodes' targets."""
    auth_file = tmp_path / "auth.toml"
    auth_file.write_text(auth_file_text(["admin", "node", "worker-any"]))
    cassandra = cassandra_node()
    keyspace = cassandra.keyspace(**CONTRACT_CONFIG)
    cassandra.empty(keyspace)
    procs, targets = [], []
    try:
        for name in ("n1", "n2"):
            target = f"127.0.0.1:{free_port()}"
            args = ["node", "--zk", zk_hosts, "--cassandra", ",".join(cassandra.contact_points)]
            args += ["--keyspace", keyspace, "--shards", str(SHARDS), "--listen", target]
            args += ["--node-id", name, "--auth-file", str(auth_file)]
            env = {"SHARDCRON_NODE_TOKEN": TOKENS["node"]}
            procs.append(Proc(args, tmp_path / f"{name}.log", env=env).start())
            targets.append(target)
        for proc, target in zip(procs, targets, strict=True):
            wait_healthy(target, proc=proc.proc)
        worker = ["worker", "--target", ",".join(targets)]
        env = {"SHARDCRON_TOKEN": TOKENS["worker-any"]}
        procs.append(Proc(worker, tmp_path / "worker.log", env=env).start())
        yield targets
    finally:
        for proc in reversed(procs):
            proc.stop()


def test_nodes_call_each_other_with_the_node_token(nodes: list[str]) -> None:
    # one client over both nodes: the token goes with every call, to either
    with Client(",".join(nodes), owner="a", token=TOKENS["admin"], timeout=15) as client:

        def status_of_both():  # type: ignore[no-untyped-def]
            status = client.cluster_status()
            owners = {s.owner for s in status.shards}
            pollers = {p for w in status.workers for p in w.pollers}
            return status if owners == pollers == {"n1", "n2"} else None

        # each node's status holds the other's view of the worker: it came through
        # GetPollerStatus, with the node token
        status = wait_until(status_of_both, WAIT, "both nodes' shards and streams")
        n2_shards = {s.shard for s in status.shards if s.owner == "n2"}

        # each api writes runs of every shard; those of the other's shards are hinted to it
        # by id
        jobs = client.create_jobs([HOURLY.replace(name=f"j{i}") for i in range(16)])

        def done() -> bool:
            runs = [run for job in jobs for run in client.list_runs(job.id).items]
            return sum(run.state == RunState.SUCCEEDED for run in runs) == len(jobs)

        wait_until(done, WAIT, "every first run done")

        with Client(nodes[0], owner="a", token=TOKENS["admin"], timeout=15) as via_n1:
            # a job of one fire due now, created through n1, is placed on n1's shards
            for i in range(8):
                [run] = via_n1.list_runs(via_n1.create_job(NOOP.replace(name=f"p{i}")).id).items
                assert run.shard not in n2_shards

            # a cancel, taken by n1, of a run of n2's shards goes to n2 (CancelRun, by id)
            waits = HOURLY.replace(name="w", task=HandlerTask(name="nobody-serves"))
            for i in range(64):
                job = via_n1.create_job(waits.replace(name=f"w{i}"))
                # its first run (once it triggered, the next fire's run is there too)
                run = min(via_n1.list_runs(job.id).items, key=lambda r: r.due_at)
                if run.shard in n2_shards:
                    break
            assert run.shard in n2_shards
            assert via_n1.cancel_run(run.id).state == RunState.CANCELLED

        # a worker's token opens no JobService call on either node
        with (
            pytest.raises(ShardcronError) as refused,
            Client(nodes[1], token=TOKENS["worker-any"]) as worker,
        ):
            worker.list_jobs()
        assert refused.value.code == "PERMISSION_DENIED"
