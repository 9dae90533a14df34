"""``python -m bench.notify_latency``: how long a failed run's webhook notification takes
to reach its receiver, from the run's end (its ``ended_at``, the worker's clock) to the
receiver reading the request (this process's clock, the same machine), in a burst of
failures: ``--jobs`` jobs (1,000 by default) whose command fails at once, created
together, each with ``--notify-on failure`` to a receiver this process serves.

One ``shardcron dev`` (SQLite, its in-process worker with ``--slots`` slots); the
receiver answers 200 at once. Prints p50, p90, p99 and the maximum, and how many
deliveries arrived.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import click
from aiohttp import web

from bench.common import Proc, free_port, wait_port
from shardcron.client.sdk import Client
from shardcron.client.types import CommandTask, JobSpec, NotifyPolicy, RetryPolicy


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


async def _receive(expected: int, port: int, timeout: float) -> list[float]:
    latencies: list[float] = []
    done = asyncio.Event()

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        arrived = time.time()
        ended = json.loads(body)["run"]["ended_at"]
        latencies.append(arrived - datetime.fromisoformat(ended).timestamp())
        if len(latencies) >= expected:
            done.set()
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        await asyncio.wait_for(done.wait(), timeout)
    except TimeoutError:
        pass
    finally:
        await runner.cleanup()
    return latencies


@click.command()
@click.option("--jobs", default=1000, show_default=True)
@click.option("--slots", default=64, show_default=True)
@click.option("--timeout", default=300.0, show_default=True)
def main(jobs: int, slots: int, timeout: float) -> None:
    out = Path(tempfile.mkdtemp(prefix="notify-latency-"))
    port, hook_port = free_port(), free_port()
    node = Proc(
        [
            sys.executable, "-m", "shardcron", "dev", "--listen", f"127.0.0.1:{port}",
            "--data-dir", str(out / "data"), "--metrics-listen", "", "--http-listen", "",
            "--workers", "1", "--slots", str(slots), "--notify-allow-private",
            "--log-level", "warning",
        ],
        out / "node.log",
    ).start()  # fmt: skip
    try:
        wait_port(port)
        spec = JobSpec(
            name="notify-burst",
            task=CommandTask(argv=("false",)),
            retry=RetryPolicy(max_attempts=1),
            notify=NotifyPolicy(webhook_url=f"http://127.0.0.1:{hook_port}/hook", on_failure=True),
        )

        async def burst() -> list[float]:
            receiving = asyncio.create_task(_receive(jobs, hook_port, timeout))
            await asyncio.sleep(0.2)
            with Client(f"127.0.0.1:{port}", owner="bench", timeout=60) as client:
                for start in range(0, jobs, 500):
                    await asyncio.to_thread(client.create_job_ids, [spec] * min(500, jobs - start))
            return await receiving

        latencies = asyncio.run(burst())
    finally:
        node.stop()
    if not latencies:
        raise click.ClickException(f"no delivery arrived (logs in {out})")
    ms = [v * 1000 for v in latencies]
    click.echo(
        f"{len(ms)}/{jobs} deliveries; run end -> receiver: p50 {_percentile(ms, 50):.0f} ms,"
        f" p90 {_percentile(ms, 90):.0f} ms, p99 {_percentile(ms, 99):.0f} ms,"
        f" max {max(ms):.0f} ms, mean {statistics.fmean(ms):.0f} ms"
    )


if __name__ == "__main__":
    main()
