"""The codec: the one place that turns protobuf into domain values and back.

``jobs`` covers the job API (jobs, specs, tasks, schedules, policies, a job's health);
``runs`` runs, a schedule's fires and output chunks; ``cluster`` the cluster's status;
``notify`` a job's notification policy and its deliveries; ``overview`` an owner's
overview and each poller's part of it; ``errors`` the table between domain errors and
gRPC status; ``stream`` the lease stream between workers and pollers (``leases`` its
leases); ``common`` the field helpers and enum tables all of them use. Readers
validate structure and raise ``InvalidArgument`` naming the field. The names exported
here are those of ``cluster.__all__``, ``errors.__all__``, ``jobs.__all__``,
``overview.__all__``, ``runs.__all__`` and ``stream.__all__``.
"""

from shardcron.client.codec import cluster, errors, jobs, overview, runs, stream
from shardcron.client.codec.cluster import *  # noqa: F403
from shardcron.client.codec.errors import *  # noqa: F403
from shardcron.client.codec.jobs import *  # noqa: F403
from shardcron.client.codec.overview import *  # noqa: F403
from shardcron.client.codec.runs import *  # noqa: F403
from shardcron.client.codec.stream import *  # noqa: F403

__all__: list[str] = []
__all__ += cluster.__all__
__all__ += errors.__all__
__all__ += jobs.__all__
__all__ += overview.__all__
__all__ += runs.__all__
__all__ += stream.__all__
