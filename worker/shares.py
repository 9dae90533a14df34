"""How a worker's free slots are shared among the poller streams that want them.

Each stream keeps what its runs hold; the free slots go to the pollers that asked for
them (``Demand``), in equal turns, streams with an unused grant first (their leases may
be on the way), then the one granted longest ago. A share left unused for
``GRANT_IDLE`` since it was given or last asked for goes to the others: that poller is
not leasing (stalled, or its runs fit elsewhere).
"""

from __future__ import annotations

from collections.abc import Sequence

from .link import PollerLink

GRANT_IDLE = 1.5  # seconds a share may stay unused before it goes to other pollers


def shared_limits(
    links: Sequence[PollerLink], *, free: int, slots: int, now: float
) -> dict[PollerLink, int]:
    """The credit limit of each of several streams: what its runs hold and its share of
    the ``free`` slots; their sum never exceeds the free slots."""
    shares = dict.fromkeys(links, 0)

    def wants(link: PollerLink) -> bool:
        unused = (link.sent_limit or 0) - link.held_slots
        idle = now - max(link.granted_at, link.demand_at) > GRANT_IDLE
        return link.demand > 0 and not (unused > 0 and idle)

    order = sorted(
        (link for link in links if wants(link)),
        key=lambda link: (-max(0, (link.sent_limit or 0) - link.held_slots), link.granted_at),
    )
    while free > 0:
        active = [link for link in order if shares[link] < min(link.demand, slots)]
        if not active:
            break
        each = max(1, free // len(active))
        for link in active:
            give = min(each, link.demand - shares[link], free)
            shares[link] += give
            free -= give
            if free == 0:
                break
    return {link: min(slots, link.held_slots + shares[link]) for link in links}
