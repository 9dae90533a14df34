"""A command run's result files, sent to the node holding its lease.

The run's supervisor copies what the command left in ``$SHARDCRON_RESULT_DIR`` into a
folder of the worker's own user once nothing of the run is left, with each file's size
and sha256, and says what it left out (``containment.results``). ``send_results`` sends
each file as ``ResultFilePiece``s in order (``PIECE_BYTES`` each) ahead of the run's
result, held back as output is when the stream does not take them
(``RunContext.result_room``: longer than output, as a piece dropped drops its file),
then removes the folder. What the worker could not send
is said in the note it returns, which goes on the run with what the supervisor left out.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
from typing import Any

from shardcron.client.limits import MAX_RESULTS_NOTE, is_result_name
from shardcron.client.stream import ResultFilePiece

from .containment.run_home import remove_tree
from .context import RunContext

log = logging.getLogger(__name__)

PIECE_BYTES = 64 * 1024  # of a result file, per piece (one output message's worth)


async def send_results(run: RunContext, results: dict[str, Any]) -> str:
    """Sends the files the supervisor's report lists (``results``: ``dir``, ``files``,
    ``notes``); returns the note of what was left out."""
    notes = [str(n) for n in results.get("notes", ())]
    folder = str(results.get("dir", ""))
    try:
        for name, size, sha256 in results.get("files", ()):
            if not is_result_name(name):  # the supervisor checked: never sent otherwise
                continue
            try:
                await _send(run, folder, name, int(size), sha256)
            except OSError as e:
                notes.append(f"{name}: left out: it could not be read: {e.strerror or e}")
    finally:
        if folder:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(remove_tree, folder)
    text = "; ".join(notes)
    return text if len(text) <= MAX_RESULTS_NOTE else text[: MAX_RESULTS_NOTE - 3] + "..."


async def _send(run: RunContext, folder: str, name: str, size: int, sha256: str) -> None:
    sink = run.on_result_piece
    if sink is None:
        return
    fd = os.open(f"{folder}/{name}", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        offset = 0
        while True:
            data = await asyncio.to_thread(os.pread, fd, PIECE_BYTES, offset)
            last = offset + len(data) >= size or not data
            sink(
                ResultFilePiece(
                    run_id=run.run_id,
                    fencing_token=run.fencing_token,
                    name=name,
                    offset=offset,
                    data=data,
                    size=size,
                    sha256=sha256,
                    last=last,
                )
            )
            offset += len(data)
            if last:
                return
            if run.result_room is not None:
                await run.result_room()
            if run.killed:  # the lease is lost: no node would take the rest
                raise OSError(errno.ECANCELED, "the run's lease was lost")
    finally:
        os.close(fd)
