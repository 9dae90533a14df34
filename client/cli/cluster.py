"""``shardcron cluster status``: the leader, its epoch, the members, the workers and the
shard map, as the api node asked sees them."""

from __future__ import annotations

import click

from shardcron.client.cli.output import print_cluster
from shardcron.client.cli.state import CliState, pass_state


@click.group()
def cluster() -> None:
    """The cluster: leader, members, workers, shards."""


@cluster.command("status")
@pass_state
def cluster_status(state: CliState) -> None:
    """Leader, epoch, members, workers (slots used/free) and the shard map."""
    status = state.client().cluster_status()
    state.emit(status, lambda: print_cluster(status))
