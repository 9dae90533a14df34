"""What a poller tells, and asks, of its node's notifications: one value, so the poller
knows nothing of the sender or of where owners' settings come from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from shardcron.client.types import Delivery, NotifyPolicy


@dataclass(frozen=True, slots=True, kw_only=True)
class NotifyHooks:
    made: Callable[[list[Delivery]], object]  # a turn's deliveries, once committed: the sender
    owner_defaults: Callable[[str], NotifyPolicy | None]  # an owner's default rules, or None
