"""Results whose poller no longer serves their run's shard: offered to the others.

A shard moves between pollers (a node joins and takes shards, one dies, one is told
to release them). The new owner adopts the previous owner's leases from the store,
under the tokens that owner issued, so a run leased just before a move needs no
second execution: its worker only has to reach the new owner. A result is *adrift*
when the poller that leased its run answered ``not_owner`` (it does not serve the
run's shard any more) or its stream is down; ``AdriftResults`` keeps it and offers
it to every connected poller, one copy in flight per stream, until one accepts it
or the shard's owner refuses it as stale. A poller that answers ``not_owner`` is
asked again at its next heartbeat (the shard may reach it later).

The leases of such runs are named in every connected poller's heartbeat in the
same way (``Worker.heartbeat_for``); the first poller that renews one holds the run
from then on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from shardcron.client.stream import RunOutcome

Key = tuple[str, int]  # (run id, fencing token)


@dataclass(slots=True, eq=False)
class _Offer:
    outcome: RunOutcome
    # streams it was sent on whose answer has not come: (link, stream number)
    asked: set[tuple[object, int]] = field(default_factory=set)


class AdriftResults:
    """Results waiting for the poller that serves their run's shard."""

    __slots__ = ("_offers",)

    def __init__(self) -> None:
        self._offers: dict[Key, _Offer] = {}

    def __len__(self) -> int:
        return len(self._offers)

    def __contains__(self, key: Key) -> bool:
        return key in self._offers

    def __iter__(self) -> Iterator[RunOutcome]:
        return (o.outcome for o in self._offers.values())

    def add(self, outcome: RunOutcome) -> None:
        key = (outcome.run_id, outcome.fencing_token)
        if key not in self._offers:
            self._offers[key] = _Offer(outcome)

    def offer(self, link: object, stream: int) -> list[RunOutcome]:
        """The results to send on this stream of ``link`` now: those not sent on it yet,
        or answered ``not_owner`` since (``not_here``)."""
        out = []
        for o in self._offers.values():
            if (link, stream) not in o.asked:
                # an earlier stream of this link will never answer
                o.asked = {a for a in o.asked if a[0] is not link}
                o.asked.add((link, stream))
                out.append(o.outcome)
        return out

    def not_here(self, link: object, stream: int, key: Key) -> None:
        """That poller does not serve the run's shard (yet): ask it again later."""
        offer = self._offers.get(key)
        if offer is not None:
            offer.asked.discard((link, stream))

    def settle(self, key: Key) -> bool:
        """A poller accepted the result, or the shard's owner refused it: it is done.
        False if it was not adrift."""
        return self._offers.pop(key, None) is not None
