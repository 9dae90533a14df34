"""``shardcron store init``: the cluster store's Cassandra keyspace and tables, created
or checked, once before the nodes start."""

from __future__ import annotations

import asyncio

import click

from shardcron.role_commands import cassandra_options


@click.group()
def store() -> None:
    """The Cassandra schema."""


@store.command("init")
@cassandra_options
@click.option("--replication-factor", default=1, show_default=True, help="SimpleStrategy factor.")
@click.option("--shards", default=64, show_default=True, help="Shard count (fixed for a cluster).")
def store_init(cassandra: str, keyspace: str, replication_factor: int, shards: int) -> None:
    """Create the keyspace and tables (or check them); safe to run again."""
    from shardcron.coordinator.cassandra.store import init_schema

    version = asyncio.run(
        init_schema(
            [h.strip() for h in cassandra.split(",")],
            keyspace=keyspace,
            replication={"class": "SimpleStrategy", "replication_factor": replication_factor},
            shard_count=shards,
        )
    )
    click.echo(f"keyspace {keyspace}: schema version {version}")
