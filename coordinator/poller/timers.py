"""The poller's timer heaps of (due, run id), read without taking entries out."""

from __future__ import annotations

from datetime import datetime


def heap_until(heap: list[tuple[datetime, str]], until: datetime, cap: int) -> list[str]:
    """The run ids of a (due, run id) heap's entries due by ``until``, at most ``cap``,
    without taking them out: the work is that of the entries returned."""
    out: list[str] = []
    stack = [0] if heap else []
    while stack and len(out) < cap:
        i = stack.pop()
        at, run_id = heap[i]
        if at > until:
            continue  # the entries below it come later still
        out.append(run_id)
        stack.extend(c for c in (2 * i + 1, 2 * i + 2) if c < len(heap))
    return out
