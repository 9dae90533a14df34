"""The Cassandra session's hand-over of replies from the driver's IO thread to the event
loop: every outcome reaches its future, many to one wake-up of the loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from shardcron.coordinator.cassandra.session import Replies


async def test_replies_that_come_meanwhile_share_one_wake_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    wake_ups = 0
    real = loop.call_soon_threadsafe

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal wake_ups
        wake_ups += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counted)
    replies = Replies(loop)
    futures = [loop.create_future() for _ in range(1000)]

    def io_thread() -> None:
        for i, future in enumerate(futures):
            if i % 2:
                replies.put(future, True, i)
            else:
                replies.put(future, False, ValueError(str(i)))

    thread = threading.Thread(target=io_thread)
    thread.start()
    thread.join()  # the loop is held meanwhile: every reply is queued before it runs
    got = await asyncio.gather(*futures, return_exceptions=True)
    assert [g if isinstance(g, int) else int(str(g)) for g in got] == list(range(1000))
    assert all(isinstance(g, ValueError) for g in got[::2])
    assert wake_ups == 1
    # once handed over, the next reply wakes the loop again
    late = loop.create_future()
    threading.Thread(target=replies.put, args=(late, True, "late")).start()
    assert await asyncio.wait_for(late, 5) == "late"
    assert wake_ups == 2
