"""The shard -> poller map the leader publishes: balanced, with minimal movement.

A pure function of the current map and the live pollers; no ZooKeeper here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def balance_shards(
    current: Mapping[int, str], pollers: Iterable[str], shard_count: int
) -> dict[int, str]:
    """The shard -> poller map for ``pollers``: counts differ by at most one, and
    as few shards as possible change owner compared with ``current``.

    Each poller keeps up to its quota of the shards it has; the larger quotas
    go to the pollers that have most, so the fewest shards are taken away; the
    shards left over (owner gone or over quota) fill the pollers under quota.
    """
    members = sorted(set(pollers))
    if not members:
        return {}
    base, extra = divmod(shard_count, len(members))
    had = {
        p: sorted(s for s, o in current.items() if o == p and 0 <= s < shard_count) for p in members
    }
    by_size = sorted(members, key=lambda p: (-len(had[p]), p))
    quota = {p: base + (1 if i < extra else 0) for i, p in enumerate(by_size)}
    owners: dict[int, str] = {}
    for p in members:
        for s in had[p][: quota[p]]:
            owners[s] = p
    free = iter(s for s in range(shard_count) if s not in owners)
    for p in members:
        for _ in range(quota[p] - len(had[p][: quota[p]])):
            owners[next(free)] = p
    return dict(sorted(owners.items()))
