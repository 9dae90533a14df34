"""Crowded instants (``coordinator/poller/crowded_instants.py``): an instant many runs are due at
is reached ahead of the lease lead, further the more runs it has, never beyond the
most, and stays reached while its runs are triggered."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shardcron.coordinator.poller.crowded_instants import CROWD, CrowdedInstants

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
BASE = timedelta(milliseconds=500)
PER_RUN = timedelta(milliseconds=1)
MOST = timedelta(seconds=10)
S = timedelta(seconds=1)


def crowds_at(at: datetime, runs: int) -> CrowdedInstants:
    crowds = CrowdedInstants(per_run=PER_RUN, most=MOST)
    for _ in range(runs):
        crowds.add(at)
    return crowds


def test_an_instant_with_few_runs_has_the_lease_lead_alone() -> None:
    crowds = crowds_at(T0, CROWD - 1)
    assert crowds.lead(T0, BASE) == BASE
    assert crowds.reach(T0 - BASE - S, BASE) == T0 - S  # now + lead
    assert crowds.next_reach(BASE) is None
    assert crowds.trigger_at(T0, BASE) == T0 - BASE


def test_a_crowded_instant_is_reached_earlier_by_its_runs_never_beyond_the_most() -> None:
    runs = 2 * CROWD
    crowds = crowds_at(T0, runs)
    lead = BASE + runs * PER_RUN
    assert crowds.lead(T0, BASE) == lead
    assert crowds.next_reach(BASE) == T0 - lead
    assert crowds.reach(T0 - lead - PER_RUN, BASE) == T0 - lead - PER_RUN + BASE  # not yet
    assert crowds.reach(T0 - lead, BASE) == T0  # its lead came: every run of it is due
    assert crowds_at(T0, 100_000).lead(T0, BASE) == MOST


def test_without_a_lead_no_instant_is_reached_ahead() -> None:
    crowds = crowds_at(T0, 10 * CROWD)
    assert crowds.lead(T0, timedelta(0)) == timedelta(0)
    assert crowds.reach(T0 - S, timedelta(0)) == T0 - S
    assert crowds.next_reach(timedelta(0)) is None


def test_a_reached_instant_stays_reached_while_its_runs_are_triggered() -> None:
    runs = 4 * CROWD
    crowds = crowds_at(T0, runs)
    now = T0 - BASE - runs * PER_RUN
    assert crowds.reach(now, BASE) == T0
    for _ in range(runs - CROWD):  # a turn's batch triggered: its lead is shorter now
        crowds.remove(T0)
    assert crowds.lead(T0, BASE) < T0 - now
    assert crowds.reach(now + PER_RUN, BASE) == T0  # the rest are not held back
    assert crowds.trigger_at(T0, BASE) <= now
    assert crowds.next_reach(BASE) is None  # nothing left to wait for


def test_an_instant_whose_runs_all_left_is_no_longer_crowded() -> None:
    crowds = crowds_at(T0, CROWD)
    for _ in range(CROWD):
        crowds.remove(T0)
    assert crowds.lead(T0, BASE) == BASE
    assert crowds.next_reach(BASE) is None
    crowds.add(T0)
    assert crowds.lead(T0, BASE) == BASE


def test_a_later_crowd_is_reached_past_an_earlier_quiet_instant() -> None:
    crowds = crowds_at(T0 + 2 * S, 2 * CROWD)
    crowds.add(T0)
    lead = crowds.lead(T0 + 2 * S, BASE)
    assert crowds.next_reach(BASE) == T0 + 2 * S - lead
    assert crowds.reach(T0 + 2 * S - lead, BASE) == T0 + 2 * S
