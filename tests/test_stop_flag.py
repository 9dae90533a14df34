"""A handler's ``cancelled`` (``StopFlag``): threading.Event's interface, with the event
made only when a thread waits; a set is never missed by a waiter on another thread."""

from __future__ import annotations

import threading

from shardcron.worker.context import HandlerContext, StopFlag


def test_a_flag_set_before_anyone_waits_is_seen_by_wait_and_is_set() -> None:
    flag = StopFlag()
    assert not flag.is_set()
    assert flag.wait(0) is False
    flag.set()
    assert flag.is_set()
    assert flag.wait(0) is True
    flag.clear()
    assert not flag.is_set()
    assert flag.wait(0.01) is False


def test_a_thread_waiting_is_woken_by_a_set_from_another_thread() -> None:
    for _ in range(200):  # the set and the first wait race each other
        flag = StopFlag()
        woke: list[bool] = []
        waiter = threading.Thread(target=lambda f=flag, w=woke: w.append(f.wait(10)))
        waiter.start()
        flag.set()
        waiter.join(15)
        assert woke == [True]


def test_each_handler_context_has_its_own_flag() -> None:
    one, two = HandlerContext(run_id="r1"), HandlerContext(run_id="r2")
    one.cancelled.set()
    assert one.cancelled.is_set()
    assert not two.cancelled.is_set()
