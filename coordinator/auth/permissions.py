"""Which role may call which method: the one table, every RPC a node serves.

Each method has one ``Access`` kind; each role is granted a set of kinds. A method
that is not in ``METHOD_ACCESS`` is refused to everyone (PERMISSION_DENIED), so a
new RPC stays closed until it is given a row here (``tests/test_auth_matrix.py``
fails while a served method has none).

- ``PUBLIC``: health checks, for load balancers: no credential needed.
- ``ANY``: any known principal (server reflection: the schema is public, the
  caller still has to be someone).
- ``READ`` / ``WRITE``: JobService, scoped to the owner the caller acts as.
- ``STATUS``: the cluster's status (no owner's data).
- ``WORKER``: the lease stream.
- ``NODE``: node-to-node calls ("not for users" in the protos).
"""

from __future__ import annotations

from enum import StrEnum

from shardcron.coordinator.auth.principals import Role


class Access(StrEnum):
    PUBLIC = "public"
    ANY = "any"
    READ = "read"
    WRITE = "write"
    STATUS = "status"
    WORKER = "worker"
    NODE = "node"


# Kinds that act for one owner: the caller's owner is resolved for them.
OWNER_SCOPED = frozenset({Access.READ, Access.WRITE})

ROLE_GRANTS: dict[Role, frozenset[Access]] = {
    Role.ADMIN: frozenset({Access.ANY, Access.READ, Access.WRITE, Access.STATUS, Access.WORKER}),
    Role.WRITER: frozenset({Access.ANY, Access.READ, Access.WRITE, Access.STATUS}),
    Role.READER: frozenset({Access.ANY, Access.READ, Access.STATUS}),
    Role.WORKER: frozenset({Access.ANY, Access.WORKER}),
    Role.NODE: frozenset({Access.ANY, Access.NODE}),
}

_JOBS = "shardcron.v1.JobService"
_CLUSTER = "shardcron.v1.ClusterService"
_POLLER = "shardcron.v1.PollerService"
_WORKER = "shardcron.v1.WorkerService"
_HEALTH = "grpc.health.v1.Health"
_REFLECTION = "grpc.reflection.v1alpha.ServerReflection"


def _rows(service: str, access: Access, *methods: str) -> dict[str, Access]:
    return {f"/{service}/{m}": access for m in methods}


METHOD_ACCESS: dict[str, Access] = {
    **_rows(
        _JOBS,
        Access.WRITE,
        "CreateJob",
        "CreateJobs",
        "UpdateJob",
        "PauseJob",
        "ResumeJob",
        "RunJobNow",
        "DeleteJob",
        "CancelRun",
        "ReplayDeadLetters",
        "DropDeadLetters",
        "UploadArtifact",
        "SetNotifyDefaults",
        "SetNotifySecret",
    ),
    **_rows(
        _JOBS,
        Access.READ,
        "GetJob",
        "ListJobs",
        "PreviewFires",
        "ListRuns",
        "GetRun",
        "WaitRun",
        "ReadRunOutput",
        "ListDeadLetters",
        "GetOverview",
        "ReadRunResult",
        "ListDeliveries",
        "GetNotifySettings",
    ),
    **_rows(_CLUSTER, Access.STATUS, "GetStatus"),
    **_rows(_WORKER, Access.WORKER, "Connect", "ReadArtifact"),
    **_rows(
        _POLLER,
        Access.NODE,
        "NotifyRuns",
        "CancelRun",
        "CancelJobRuns",
        "JobChanged",
        "GetPollerStatus",
        "WaitingReasons",
        "GetOverviewPart",
    ),
    **_rows(_HEALTH, Access.PUBLIC, "Check", "List", "Watch"),
    **_rows(_REFLECTION, Access.ANY, "ServerReflectionInfo"),
}


def access_of(method: str) -> Access | None:
    """The access kind of a full method name (``/pkg.Service/Method``); None: not listed."""
    return METHOD_ACCESS.get(method)


def allowed(role: Role, access: Access) -> bool:
    return access == Access.PUBLIC or access in ROLE_GRANTS[role]
