"""The ``shardcron`` program: the user CLI plus the commands that run roles.

The commands that run roles are one module each: ``dev_command`` (every role in one
process on the embedded store, with its workers), ``node_command`` (a cluster node),
``worker_command`` (a worker against a node or a cluster) and ``store_command`` (the
cluster store's schema); what they share is ``role_commands``'s.
"""

from __future__ import annotations

from shardcron.client.cli import cli
from shardcron.dev_command import dev
from shardcron.node_command import node
from shardcron.store_command import store
from shardcron.worker_command import worker_cmd

for command in (dev, worker_cmd, node, store):
    cli.add_command(command)


def main() -> None:
    cli(prog_name="shardcron")


if __name__ == "__main__":
    main()
