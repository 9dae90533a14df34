"""The poller's keyed time index (coordinator/poller/timeline.py): exact membership
and length however keys are removed and moved, earliest first, reads that leave the
keys in."""

from __future__ import annotations

import random
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from shardcron.coordinator.poller.timeline import Timeline
from tests.support.held_runs import T0


def at(seconds: int):  # type: ignore[no-untyped-def]
    return T0 + timedelta(seconds=seconds)


def test_keys_come_out_earliest_first_ties_by_key() -> None:
    t = Timeline()
    for key, s in (("b", 5), ("a", 5), ("c", 1), ("d", 9)):
        t.push(key, at(s))
    assert t.first() == (at(1), "c")
    assert [t.pop() for _ in range(len(t))] == [
        (at(1), "c"),
        (at(5), "a"),
        (at(5), "b"),
        (at(9), "d"),
    ]
    assert t.first() is None and t.first_at() is None


def test_a_removed_key_is_gone_at_once() -> None:
    t = Timeline()
    t.push("a", at(1))
    t.push("b", at(2))
    assert t.remove("a") and not t.remove("a")
    assert len(t) == 1 and "a" not in t and "b" in t
    assert t.first() == (at(2), "b")
    assert t.until(at(5), 10) == ["b"]
    assert t.pop_until(at(5), 10) == [(at(2), "b")]
    assert len(t) == 0


def test_a_key_pushed_again_moves() -> None:
    t = Timeline()
    t.push("a", at(1))
    t.push("b", at(2))
    t.push("a", at(3))
    assert len(t) == 2 and t.at("a") == at(3)
    assert t.pop_until(at(2), 10) == [(at(2), "b")]
    assert t.pop_until(at(3), 10) == [(at(3), "a")]
    t.push("a", at(4))
    t.remove("a")
    t.push("a", at(4))  # back at the time of an entry left behind: still once
    assert t.pop_until(at(9), 10) == [(at(4), "a")]


def test_pop_until_takes_at_most_its_limit_and_until_leaves_the_keys_in() -> None:
    t = Timeline()
    for i in (5, 1, 9, 3, 7, 2, 8, 4, 6, 0):
        t.push(f"r{i}", at(i))
    t.remove("r2")
    assert sorted(t.until(at(4), 100)) == ["r0", "r1", "r3", "r4"]
    assert len(t.until(at(4), 2)) == 2
    assert t.until(at(-1), 100) == []
    assert len(t) == 9
    assert t.pop_until(at(4), 3) == [(at(0), "r0"), (at(1), "r1"), (at(3), "r3")]
    assert len(t) == 6


@given(st.lists(st.tuples(st.sampled_from(["push", "remove", "pop"]), st.integers(0, 20))))
def test_it_holds_what_a_dict_would_hold(steps: list[tuple[str, int]]) -> None:
    t, model = Timeline(), {}
    for op, n in steps:
        key = f"k{n % 7}"
        if op == "push":
            t.push(key, at(n))
            model[key] = at(n)
        elif op == "remove":
            assert t.remove(key) == (model.pop(key, None) is not None)
        elif model:
            earliest = min((v, k) for k, v in model.items())
            assert t.pop() == earliest
            del model[earliest[1]]
        assert len(t) == len(model) and set(t) == set(model)
        assert t.first() == (min((v, k) for k, v in model.items()) if model else None)


def test_many_moves_leave_no_more_than_twice_the_live_entries_behind() -> None:
    t = Timeline()
    rng = random.Random(7)
    for _ in range(10_000):
        t.push(f"k{rng.randrange(10)}", at(rng.randrange(1000)))
    assert len(t) == 10
    assert len(t._heap) <= 2 * len(t) + 65  # noqa: SLF001 - its bound on what is left behind
