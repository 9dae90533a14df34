"""Where a held run's traffic goes: the stream of the poller that holds its lease now.

A run's lease may move to another poller while it runs (its shard moved: the poller
that renews it holds it from then on), so what the run sends besides its result is
routed when it is sent, never fixed at its lease: its output (or, while its node has
paused it, its spool file: ``output_spool``), the pieces of its result files, the wait
for room in a full output buffer, and the fetch of its job's code archive. Each is
found by run id and fencing token; what names a lease this worker no longer holds
goes to the stream it came through (output, result pieces: the poller refuses what
its stream does not hold), or fails (an artifact fetch).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator

from shardcron.client.stream import OutputRoom, ResultFilePiece

from .artifacts import ArtifactFetchFailed
from .leased_runs import HeldRun
from .link import PollerLink
from .outbox import OUTPUT_ROOM_WAIT, Outbox
from .output_spool import OutputSpoolConfig, OutputSpools


class RunRoutes:
    """The routes of one worker's held runs (module docstring). ``runs`` is the worker's
    own map of the runs it holds, by run id, read at each send; ``stats`` its counters
    (``output_bytes``). It owns the runs' output spools (``spools``)."""

    def __init__(
        self, runs: dict[str, HeldRun], spool: OutputSpoolConfig, stats: Counter[str]
    ) -> None:
        self._runs = runs
        self._stats = stats
        self.spools = OutputSpools(spool, self.sink_of)

    def output(self, link: PollerLink, run_id: str, token: int, stream: str, data: bytes) -> None:
        """A piece of the run's output: to its spool while its node has paused it, else
        to the stream of the poller holding its lease (``link``, its lease's stream, when
        it holds it no more)."""
        self._stats["output_bytes"] += len(data)
        if self.spools.takes(run_id, token, stream, data):
            return  # its node cannot take it now: kept on disk
        run = self._runs.get(run_id)
        if run is not None and run.token == token:
            link = run.link  # the poller holding the lease now (its shard may have moved)
        link.outbox.output(run_id, token, stream, data)

    def fetch_artifact(self, run_id: str, token: int, sha256: str) -> AsyncIterator[bytes]:
        """The artifact's bytes, from the poller holding the run's lease now."""
        run = self._runs.get(run_id)
        if run is None or run.token != token:
            raise ArtifactFetchFailed(f"artifact {sha256}: the run's lease is gone")
        return run.link.read_artifact(run_id, token, sha256)

    def sink_of(self, run_id: str, token: int) -> Outbox | None:
        """Where the run's spooled output goes: the stream of the poller holding it."""
        run = self._runs.get(run_id)
        return run.link.outbox if run is not None and run.token == token else None

    def output_room(self, link: PollerLink, room: OutputRoom) -> None:
        """The node pauses or resumes runs' output (``output_spool``): only those whose
        lease ``link`` holds, under the token named."""
        for refs, act in ((room.paused, self.spools.pause), (room.resumed, self.spools.resume)):
            for ref in refs:
                run = self._runs.get(ref.run_id)
                if run is not None and run.link is link and run.token == ref.fencing_token:
                    act(ref.run_id, ref.fencing_token)

    def result_piece(self, link: PollerLink, run_id: str, piece: ResultFilePiece) -> None:
        """A piece of one of the run's result files, to the poller holding its lease."""
        run = self._runs.get(run_id)
        if run is not None and run.token == piece.fencing_token:
            link = run.link
        link.outbox.result_piece(piece)

    async def wait_for_room(self, run_id: str, wait: float = OUTPUT_ROOM_WAIT) -> None:
        """Waits while the stream of the poller holding the run has a full output buffer
        (``wait`` seconds at most)."""
        run = self._runs.get(run_id)
        if run is not None:
            await run.link.outbox.output_room(wait)
