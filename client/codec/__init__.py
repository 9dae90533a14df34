"""The codec: the one place that turns protobuf into domain values and back.

``jobs`` covers the job API (jobs, runs, schedules, cluster status); ``overview`` an
owner's overview and each poller's part of it; ``errors`` the
table between domain errors and gRPC status; ``stream`` the lease stream between
workers and pollers; ``common`` the field helpers and enum tables both use. Readers
validate structure and raise ``InvalidArgument`` naming the field. The names exported
here are those of ``jobs.__all__``, ``errors.__all__`` and ``stream.__all__``.
"""

from shardcron.client.codec import errors, jobs, overview, stream
from shardcron.client.codec.errors import *  # noqa: F403
from shardcron.client.codec.jobs import *  # noqa: F403
from shardcron.client.codec.overview import *  # noqa: F403
from shardcron.client.codec.stream import *  # noqa: F403

__all__: list[str] = []
__all__ += errors.__all__
__all__ += jobs.__all__
__all__ += overview.__all__
__all__ += stream.__all__
