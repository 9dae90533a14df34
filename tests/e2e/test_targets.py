"""Several api targets: a client given two nodes keeps working when one dies.

Two ``shardcron dev`` on separate data directories stand in for two api nodes of one
cluster (they are separate stores, so only that calls keep succeeding is checked,
not what they return).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path

from shardcron.client.errors import ShardcronError
from shardcron.client.sdk import AsyncClient, Client
from shardcron.client.types import HandlerTask, JobSpec
from tests.e2e.harness import DevServer

CALLERS = 4  # clients calling at once, so some calls are in flight when the node dies


def test_a_client_with_two_targets_survives_one_dying(tmp_path: Path) -> None:
    first = DevServer(tmp_path / "first", extra=["--workers", "0"]).start()
    second = DevServer(tmp_path / "second", extra=["--workers", "0"]).start()
    calls = {"before": 0, "after": 0}
    failed: list[str] = []
    killed = threading.Event()
    stop = threading.Event()
    spec = JobSpec(name="failover", task=HandlerTask(name="noop"))

    def call_on(client: Client) -> None:
        # reads, and creates made safe to repeat by their idempotency key
        while not stop.is_set():
            for call in (
                lambda: client.list_jobs(page_size=5),
                client.cluster_status,
                lambda: client.create_job(spec, idempotency_key=uuid.uuid4().hex),
            ):
                phase = "after" if killed.is_set() else "before"
                try:
                    call()
                    calls[phase] += 1
                except ShardcronError as e:
                    failed.append(f"{phase}: {e.code}: {e.message}")

    async def call_async(targets: str) -> None:
        async with AsyncClient(targets, owner="failover", timeout=10) as client:
            while not stop.is_set():
                phase = "after" if killed.is_set() else "before"
                try:
                    await client.list_jobs(page_size=5)
                    await client.create_job(spec, idempotency_key=uuid.uuid4().hex)
                    calls[phase] += 2
                except ShardcronError as e:
                    failed.append(f"async {phase}: {e.code}: {e.message}")

    targets = f"{first.target},{second.target}"
    clients = [Client(targets, owner="failover", timeout=10) for _ in range(CALLERS)]
    callers = [threading.Thread(target=call_on, args=(c,)) for c in clients]
    callers.append(threading.Thread(target=asyncio.run, args=(call_async(targets),)))
    try:
        for caller in callers:
            caller.start()
        time.sleep(1.0)
        first.kill()
        killed.set()
        time.sleep(3.0)
        stop.set()
        for caller in callers:
            caller.join(30)
        print(f"calls before the kill {calls['before']}, after {calls['after']}; failed {failed}")
        assert calls["before"] > 0 and calls["after"] > 0
        assert failed == []
    finally:
        stop.set()
        for c in clients:
            c.close()
        first.stop()
        second.stop()
