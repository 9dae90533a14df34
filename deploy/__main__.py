"""Fetch, configure, start, health-wait and stop real ZooKeeper, Cassandra and versitygw.

The command line of the deploy package (``python3 -m deploy --help``); it only
calls the package, and prints a start's connect string or contact points on
stdout, progress on stderr. Exit status 1 means a server could not be fetched,
started or health-checked.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from deploy.cassandra import Cassandra, ensure_cds_archive
from deploy.errors import ServerError, log
from deploy.nodes import Cluster
from deploy.tools import KINDS, ensure_tools, fetch
from deploy.versitygw import VersityGateway, fetch_versitygw
from deploy.zookeeper import ZooKeeper


def _cluster_from_dir(kind: str, directory: str) -> Cluster:
    """Rebuild a cluster object from DIR/<kind>.json (for stop/status/kill/start-node)."""
    state_file = Path(directory) / f"{kind}.json"
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError) as exc:
        raise ServerError(f"no {kind} cluster recorded in {directory} ({exc})") from exc
    if kind == "zookeeper":
        return ZooKeeper(directory, nodes=state["nodes"], port=state["port"])
    return Cassandra(
        directory,
        nodes=state["nodes"],
        heap=state["heap"],
        use_cds=state.get("use_cds", True),
        server=state.get("server", False),
    )


def _print_status(cluster: Cluster) -> None:
    for entry in cluster.status():
        print(f"{cluster.kind} " + " ".join(f"{k}={v}" for k, v in entry.items()))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m deploy", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("ensure-tools", help="apt-get install java 17 and maven if missing")
    fetch_p = sub.add_parser(
        "fetch", help="download server jars (all: both kinds), or build versitygw, into the cache"
    )
    fetch_p.add_argument("what", nargs="?", default="all", choices=[*KINDS, "all", "versitygw"])
    gateway = sub.add_parser("versitygw", help="an S3-compatible gateway serving DIR/data")
    gateway_actions = gateway.add_subparsers(dest="action", required=True)
    gateway_start = gateway_actions.add_parser("start", help="start it and wait; prints its URL")
    gateway_start.add_argument("--dir", required=True)
    gateway_start.add_argument("--port", type=int, default=7070)
    gateway_start.add_argument("--bucket", action="append", default=[], help="a bucket to make")
    gateway_actions.add_parser("stop").add_argument("--dir", required=True)
    grace_help = "seconds between SIGTERM and SIGKILL (0: SIGKILL at once)"
    for name in ("stop", "status"):
        p = sub.add_parser(name, help=f"{name} every cluster recorded in DIR")
        p.add_argument("--dir", required=True)
        if name == "stop":
            p.add_argument("--grace", type=float, default=None, help=grace_help)
    for kind in KINDS:
        kind_p = sub.add_parser(kind, help=f"manage a {kind} cluster")
        actions = kind_p.add_subparsers(dest="action", required=True)
        start = actions.add_parser("start", help="start (or complete) the cluster and wait")
        start.add_argument("--dir", required=True)
        start.add_argument("--nodes", type=int, choices=(1, 3), default=1)
        if kind == "zookeeper":
            start.add_argument("--port", type=int, default=2181)
        else:
            start.add_argument("--heap", default="512M")
            start.add_argument(
                "--no-cds", action="store_true", help="start without the class-data-sharing archive"
            )
            start.add_argument(
                "--server",
                action="store_true",
                help="size the node for load (threads, off-heap memtables), not for a fast start",
            )
        actions.add_parser("status").add_argument("--dir", required=True)
        stop = actions.add_parser("stop")
        stop.add_argument("--dir", required=True)
        stop.add_argument("--grace", type=float, default=None, help=grace_help)
        for name in ("kill-node", "start-node"):
            p = actions.add_parser(name)
            p.add_argument("--dir", required=True)
            p.add_argument("--node", type=int, required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "ensure-tools":
            ensure_tools()
        elif args.command == "fetch" and args.what == "versitygw":
            print(fetch_versitygw())
        elif args.command == "fetch":
            for kind in KINDS if args.what == "all" else (args.what,):
                print(fetch(kind))
                if kind == "cassandra":
                    ensure_cds_archive()
        elif args.command in ("stop", "status"):
            kinds = [k for k in KINDS if (Path(args.dir) / f"{k}.json").exists()]
            if not kinds:
                log(f"no zookeeper.json or cassandra.json in {args.dir}: nothing to {args.command}")
            for kind in kinds:
                cluster = _cluster_from_dir(kind, args.dir)
                cluster.stop(args.grace) if args.command == "stop" else _print_status(cluster)
        elif args.command == "versitygw":
            gateway = VersityGateway(args.dir, port=getattr(args, "port", 0))
            if args.action == "start":
                print(gateway.start(buckets=args.bucket).endpoint)
            else:
                gateway.stop()
        elif args.action == "start":
            if args.command == "zookeeper":
                zk = ZooKeeper(args.dir, nodes=args.nodes, port=args.port).start()
                print(zk.connect_string)
            else:
                cass = Cassandra(
                    args.dir,
                    nodes=args.nodes,
                    heap=args.heap,
                    use_cds=not args.no_cds,
                    server=args.server,
                ).start()
                print(",".join(cass.contact_points))
        else:
            cluster = _cluster_from_dir(args.command, args.dir)
            if args.action == "stop":
                cluster.stop(args.grace)
            elif args.action == "status":
                _print_status(cluster)
            elif args.action == "kill-node":
                cluster.kill_node(args.node)
            elif args.action == "start-node":
                cluster.start_node(args.node)
    except ServerError as exc:
        log(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
