"""``python -m bench.profile``: where the embedded node (or its worker) spends its time
during W1.

Starts a node and its worker as W1 does (``shardcron_embedded``), records the node
(``--process worker``: the worker) with py-spy (every thread, sampled at ``--rate`` Hz) while ``--jobs`` no-op jobs are
submitted and run, and prints the frames that were busiest: by own time (self) and
with what they called (total), as shares of the samples where a thread was busy
(threads waiting on a lock, a queue, a socket or an fsync are left out).
"""

from __future__ import annotations

import asyncio
import collections
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import click

from bench.common import wait_ended
from bench.systems.shardcron_embedded import IN_FLIGHT, EmbeddedNode
from bench.systems.shardcron_workloads import submit
from shardcron.client.types import HandlerTask, JobSpec

IDLE = ("idle", "_worker (concurrent", "wait (threading", "get (queue", "select (selectors")


def busiest(raw: str, top: int) -> list[str]:
    """The report of py-spy's raw (collapsed) stacks: top frames by self and total."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    busy = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if any(mark in frames[-1] for mark in IDLE):
            continue
        busy += int(count)
        own[frames[-1]] += int(count)
        for frame in set(frames):
            total[frame] += int(count)
    lines = [f"busy samples: {busy}", "--- self"]
    lines += [f"{100 * c / busy:5.1f}% {f}" for f, c in own.most_common(top)]
    lines.append("--- total")
    lines += [f"{100 * c / busy:5.1f}% {f}" for f, c in total.most_common(top)]
    return lines


@click.command()
@click.option("--jobs", default=20_000, show_default=True)
@click.option("--rate", default=200, show_default=True, help="Samples per second.")
@click.option("--top", default=30, show_default=True)
@click.option("--process", type=click.Choice(["node", "worker"]), default="node", show_default=True)
def main(jobs: int, rate: int, top: int, process: str) -> None:
    """Profile the embedded node, or its worker, through W1 (needs py-spy, in the bench extra)."""
    out = Path(tempfile.mkdtemp(prefix="shardcron-profile-"))
    node = EmbeddedNode(out, "w1")
    spy_exe = Path(sys.executable).parent / "py-spy"
    try:
        node.start()
        node.wait_workers()
        pid = node.node.pid if process == "node" else node.workers[0].pid
        args = [str(spy_exe), "record", "--pid", str(pid), "--format", "raw"]
        args += ["--rate", str(rate), "--output", str(out / "raw.txt"), "--nonblocking"]
        spy = subprocess.Popen([*args, "--threads"], stdout=subprocess.DEVNULL)
        spec = JobSpec(name="w1", task=HandlerTask(name="noop"))
        asyncio.run(submit([node.target], [spec] * jobs, IN_FLIGHT))
        wait_ended(node.metrics, jobs, 600)
        spy.send_signal(signal.SIGINT)  # py-spy writes its output when interrupted
        spy.wait(60)
    finally:
        node.stop()
    click.echo("\n".join(busiest((out / "raw.txt").read_text(), top)))
    click.echo(f"[profile] raw stacks: {out / 'raw.txt'}", err=True)


if __name__ == "__main__":
    main()
