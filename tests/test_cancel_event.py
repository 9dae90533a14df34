"""The per-run ``cancelled`` event: a ``threading.Event`` made without its condition
until it is set or waited on, and still one across threads."""

import threading

from shardcron.worker.context import CancelEvent, HandlerContext


def test_a_handler_context_gets_a_fresh_unset_event():
    a, b = HandlerContext(run_id="a"), HandlerContext(run_id="b")
    assert isinstance(a.cancelled, threading.Event)
    assert a.cancelled is not b.cancelled
    assert not a.cancelled.is_set()


def test_set_clear_and_wait_behave_as_an_event():
    event = CancelEvent()
    assert not event.wait(0.01)
    event.set()
    assert event.is_set() and event.wait(0)
    event.clear()
    assert not event.is_set()


def test_a_waiting_thread_is_woken_by_a_set_from_another():
    event = CancelEvent()
    woke: list[bool] = []
    waiters = [threading.Thread(target=lambda: woke.append(event.wait(5))) for _ in range(4)]
    for t in waiters:
        t.start()
    event.set()
    for t in waiters:
        t.join()
    assert woke == [True] * 4
