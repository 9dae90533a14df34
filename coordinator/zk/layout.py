"""Where a cluster's state lives in ZooKeeper and how each node's data is written.

The one place that knows the paths under ``/shardcron/<cluster>`` and the JSON in
each node (see the package docstring for the layout). Running clusters depend on
both: a change here is a change of the cluster's on-disk format. Everything here
is a plain function of a kazoo client, with no state of its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import WatchedEvent
from kazoo.retry import ForceRetryError

from shardcron.client.errors import FailedPrecondition
from shardcron.coordinator.coordination import ClusterView, Member

Watch = Callable[[WatchedEvent], None]


@dataclass(frozen=True, slots=True)
class ZkPaths:
    """Where everything lives for one cluster."""

    root: str

    @property
    def leader(self) -> str:
        return f"{self.root}/leader"

    @property
    def epoch(self) -> str:
        return f"{self.root}/epoch"

    @property
    def fencing(self) -> str:
        return f"{self.root}/fencing"

    @property
    def pollers(self) -> str:
        return f"{self.root}/members/pollers"

    @property
    def workers(self) -> str:
        return f"{self.root}/members/workers"

    @property
    def assignment(self) -> str:
        return f"{self.root}/assignment"

    @property
    def owners(self) -> str:
        return f"{self.root}/owners"

    def owner(self, shard: int) -> str:
        return f"{self.root}/owners/{shard}"

    def poller(self, poller_id: str) -> str:
        return f"{self.pollers}/{poller_id}"

    def worker(self, worker_id: str) -> str:
        return f"{self.workers}/{worker_id}"


def cluster_paths(cluster: str) -> ZkPaths:
    return ZkPaths(f"/shardcron/{cluster}")


def dump(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def load(data: bytes | None) -> dict[str, Any]:
    if not data:
        return {}
    value = json.loads(data)
    return value if isinstance(value, dict) else {}


def check_name(what: str, name: str) -> None:
    """Raises ValueError unless ``name`` can be one ZooKeeper node name."""
    if not name or "/" in name or name in (".", "..") or name != name.strip():
        raise ValueError(f"{what} {name!r} cannot be a ZooKeeper node name")


def member_data(address: str, info: Mapping[str, Any] | None = None) -> bytes:
    """A member node's data: what it advertised, plus where to reach it."""
    return dump({**(info or {}), "address": address})


def owner_data(poller_id: str, fencing_epoch: int) -> bytes:
    """An ``owners/<shard>`` node's data."""
    return dump({"poller": poller_id, "fencing_epoch": fencing_epoch})


def assignment_data(term: int, leader: str, owners: Mapping[int, str]) -> bytes:
    """The ``assignment`` node's data, as the leader of ``term`` writes it."""
    return dump({"epoch": term, "leader": leader, "owners": {str(s): p for s, p in owners.items()}})


def ensure_layout(zk: KazooClient, paths: ZkPaths, shard_count: int | None) -> None:
    """Creates what is missing of the layout; records ``shard_count`` in the root
    or checks it against the one recorded (``FailedPrecondition`` if another).
    Idempotent: meant to be retried."""
    root = paths.root
    wanted = {"shard_count": shard_count} if shard_count is not None else {}
    try:
        zk.create(root, dump(wanted), makepath=True)
    except NodeExistsError:
        data, stat = zk.get(root)
        config = load(data)
        if shard_count is not None:
            if "shard_count" not in config:
                try:
                    zk.set(root, dump({**config, **wanted}), version=stat.version)
                except BadVersionError:
                    raise ForceRetryError() from None
            elif int(config["shard_count"]) != shard_count:
                raise FailedPrecondition(
                    f"cluster {root} has {config['shard_count']} shards, "
                    f"this node is configured with {shard_count}"
                ) from None
    for path, initial in (
        (paths.leader, b""),
        (paths.epoch, dump({"epoch": 0})),
        (paths.fencing, dump({"fencing_epoch": 0})),
        (paths.pollers, b""),
        (paths.workers, b""),
        (paths.assignment, dump({"epoch": 0, "owners": {}})),
        (paths.owners, b""),
    ):
        try:
            zk.create(path, initial, makepath=True)
        except NodeExistsError:
            pass


def read_members(
    zk: KazooClient, path: str, watch: Watch | None = None, *, data_watch: Watch | None = None
) -> list[Member]:
    """The members under ``path`` (pollers or workers), by id. ``watch`` is set on the
    list of members, ``data_watch`` on each member's node."""
    found = read_children(zk, path, zk.get_children(path, watch=watch), watch=data_watch)
    members = []
    for child in sorted(found):
        info = load(found[child])
        address = str(info.pop("address", ""))
        members.append(Member(id=child, address=address, info=info))
    return members


def read_children(
    zk: KazooClient, path: str, children: list[str], *, watch: Watch | None = None
) -> dict[str, bytes]:
    """The data of each of ``children`` of ``path`` that still exists, by name (``watch``
    set on each). The reads are pipelined: one round trip for all, not one each (the
    view reads every shard's owner node)."""
    pending = [(child, zk.get_async(f"{path}/{child}", watch=watch)) for child in children]
    found: dict[str, bytes] = {}
    for child, result in pending:
        try:
            found[child] = result.get()[0]
        except NoNodeError:
            continue
    return found


def read_assignment(
    zk: KazooClient, paths: ZkPaths, watch: Watch | None = None
) -> tuple[int, dict[int, str], int]:
    """The published assignment: its epoch, shard -> poller, and the node's version."""
    data, stat = zk.get(paths.assignment, watch=watch)
    value = load(data)
    owners = {int(s): str(p) for s, p in value.get("owners", {}).items()}
    return int(value.get("epoch", 0)), owners, stat.version


def read_view(zk: KazooClient, paths: ZkPaths, watch: Watch | None = None) -> ClusterView:
    """Leader (the first election contender), epoch, members and the pollers
    holding each shard's owner node. ``watch`` is set on every node read, and on the
    contenders' list: it is called once any of these changes."""
    if watch is not None:
        zk.get_children(paths.leader, watch=watch)  # contenders() sets none
    contenders = zk.Lock(paths.leader).contenders()
    epoch = int(load(zk.get(paths.epoch, watch=watch)[0]).get("epoch", 0))
    pollers = zk.get_children(paths.pollers, watch=watch)
    owners_path = paths.owners
    found = read_children(zk, owners_path, zk.get_children(owners_path, watch=watch), watch=watch)
    owners = {int(child): str(load(data).get("poller", "")) for child, data in found.items()}
    return ClusterView(
        mode="zookeeper",
        leader=contenders[0] if contenders else "",
        epoch=epoch,
        members=sorted(set(pollers) | set(contenders)),
        shard_owners=dict(sorted(owners.items())),
    )
