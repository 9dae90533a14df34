"""The lease book (coordinator/poller/lease_book.py) driven by hand-set times, no clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shardcron.coordinator.poller.lease_book import LeaseBook

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
TTL = timedelta(seconds=10)
GRACE = timedelta(milliseconds=500)
TICK = timedelta(microseconds=1)


def book(grace: timedelta = GRACE, epoch: int = 3) -> LeaseBook:
    b = LeaseBook(lease_ttl=TTL, expiry_grace=grace)
    b.set_fencing_epoch(epoch)
    return b


def test_tokens_carry_the_fencing_epoch_and_a_sequence_from_one() -> None:
    b = book(epoch=3)
    assert [b.grant(f"r{i}", "w", T0)[0] for i in range(3)] == [
        3 << 32 | 1,
        3 << 32 | 2,
        3 << 32 | 3,
    ]


def test_a_new_fencing_epoch_restarts_the_sequence_and_tokens_still_grow() -> None:
    b = book(epoch=3)
    for i in range(5):
        b.grant(f"r{i}", "w", T0)
    old = b.grant("r", "w", T0)[0]
    b.set_fencing_epoch(4)
    new = b.grant("r", "w", T0)[0]
    assert new == 4 << 32 | 1 and new > old


def test_the_same_epoch_again_and_a_cleared_book_go_on_with_the_sequence() -> None:
    b = book(epoch=3)
    b.grant("a", "w", T0)
    b.set_fencing_epoch(3)
    b.clear()
    assert b.grant("b", "w", T0)[0] == 3 << 32 | 2


@pytest.mark.parametrize("grace", [timedelta(0), GRACE])
def test_a_lease_is_taken_back_exactly_at_expires_at_plus_the_grace(grace: timedelta) -> None:
    b = book(grace=grace)
    token, expires = b.grant("r", "w", T0)
    assert expires == T0 + TTL
    assert b.expired(expires + grace - TICK) == []
    assert b.holds("r", token)
    assert b.expired(expires + grace) == ["r"]  # now == expires_at (+ grace): expired
    assert not b.holds("r", token)
    assert b.expired(expires + grace + TTL) == [], "taken back twice"


def test_with_a_grace_a_lease_is_still_held_at_its_expiry() -> None:
    b = book(grace=GRACE)
    _, expires = b.grant("r", "w", T0)
    assert b.expired(expires) == []
    assert b.next_expiry() == expires + GRACE


def test_a_renewal_counts_the_ttl_from_the_heartbeat() -> None:
    b = book(grace=timedelta(0))
    token, first = b.grant("r", "w", T0)
    later = T0 + timedelta(seconds=4)
    assert b.renew("r", token, "w", later, active=True) == later + TTL
    assert b.expired(first) == []  # the first expiry's entry is stale now
    assert b.expired(later + TTL - TICK) == []
    assert b.expired(later + TTL) == ["r"]


@pytest.mark.parametrize(
    ("run_id", "token_delta", "worker", "active"),
    [
        ("other", 0, "w", True),  # not leased here
        ("r", 1, "w", True),  # another token: an older or newer lease
        ("r", 0, "w2", True),  # granted to another worker
        ("r", 0, "w", False),  # this poller is not active (suspended, starting)
    ],
)
def test_a_renewal_is_refused_unless_current_token_same_worker_and_active(
    run_id: str, token_delta: int, worker: str, active: bool
) -> None:
    b = book()
    token, expires = b.grant("r", "w", T0)
    assert b.renew(run_id, token + token_delta, worker, T0, active=active) is None
    assert b.expired(expires + GRACE) == ["r"], "a refused renewal extended the lease"


def test_a_lease_sent_later_counts_its_ttl_from_the_send() -> None:
    b = book(grace=timedelta(0))
    token, granted = b.grant("r", "w", T0)
    sent = T0 + timedelta(milliseconds=300)  # after the store commit
    assert b.sent("r", token, sent) == sent + TTL
    assert b.expires_at("r") == sent + TTL, "the run's final record takes it from here"
    assert b.expires_at("nobody") is None
    assert b.expired(granted) == []
    assert b.expired(sent + TTL) == ["r"]
    assert b.sent("r", token, sent) is None, "sent after it was taken back"


def test_an_orphan_is_held_one_full_ttl_after_the_take_over() -> None:
    b = book(grace=timedelta(0))
    taken = T0 + timedelta(seconds=2)
    stored = T0 - timedelta(seconds=1)  # its stored lease ran out before the take-over
    expires = b.adopt("r", 7, "w-old", stored, taken_at=taken, now=taken)
    assert expires == taken + TTL
    assert b.expired(expires - TICK) == []
    assert b.expired(expires) == ["r"]


def test_an_orphan_whose_stored_lease_runs_longer_keeps_it() -> None:
    b = book()
    stored = T0 + 2 * TTL
    assert b.adopt("r", 7, "w-old", stored, taken_at=T0, now=T0) == stored
    assert b.adopt("q", 8, "w-old", None, taken_at=T0, now=T0) == T0 + TTL


def test_an_adopted_lease_is_renewed_only_for_the_worker_that_held_it() -> None:
    b = book()
    b.adopt("r", 7, "w-old", None, taken_at=T0, now=T0)
    assert b.renew("r", 7, "w-new", T0, active=True) is None
    assert b.renew("r", 7, "w-old", T0 + TICK, active=True) == T0 + TICK + TTL


def test_a_released_run_is_not_taken_back_and_its_token_is_no_longer_held() -> None:
    b = book()
    token, expires = b.grant("r", "w", T0)
    b.release("r")
    assert not b.holds("r", token)
    assert b.renew("r", token, "w", T0, active=True) is None
    assert b.expired(expires + GRACE) == []
    assert len(b) == 0


def test_an_old_tokens_expiry_does_not_take_back_the_run_leased_again() -> None:
    b = book(grace=timedelta(0))
    old, first = b.grant("r", "w", T0)
    b.release("r")  # refused by its worker: leased again
    new, second = b.grant("r", "w2", T0 + timedelta(seconds=5))
    assert new != old
    assert b.expired(first) == []
    assert b.holds("r", new)
    assert b.expired(second) == ["r"]
