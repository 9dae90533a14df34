"""An owner's notification settings: the rules its jobs without rules of their own
follow, and the secret its deliveries are signed with (write-only; sealed at rest with
the node's key file, as a command's ``secret_env`` is).

Stored one record per owner (``JobStore.put_owner_settings``), and held by every node
with a poller in an ``OwnerSettingsBook``: read whole at start, before the poller's
first turn, and again every ``REFRESH`` (the records are few: one per owner who set
something), so a change reaches every node within that; the node that made it has it
at once. The poller's ends read the defaults from the book (a turn never waits on the
store), the sender the secrets.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from shardcron.client.types import NotifyPolicy
from shardcron.coordinator.rows import _dump, _load

log = logging.getLogger("shardcron.notify")

REFRESH = timedelta(seconds=5)


@dataclass(frozen=True, slots=True, kw_only=True)
class OwnerSettings:
    owner: str
    notify_defaults: NotifyPolicy | None = None
    notify_secret: str = ""  # sealed when the node has a key file; "" = none
    updated_at: datetime | None = None


def policy_to_json(policy: NotifyPolicy | None) -> str:
    return "" if policy is None else json.dumps(_dump(policy), separators=(",", ":"))


def policy_from_json(text: str) -> NotifyPolicy | None:
    return _load(NotifyPolicy, json.loads(text)) if text else None


class OwnerSettingsBook:
    """Every owner's settings as last read (module docstring), and the secrets opened."""

    def __init__(self, *, file_secrets: Mapping[str, bytes] | None = None) -> None:
        self._settings: dict[str, OwnerSettings] = {}
        self._file_secrets = dict(file_secrets or {})
        self._secrets: dict[str, bytes] = dict(self._file_secrets)

    def defaults(self, owner: str) -> NotifyPolicy | None:
        s = self._settings.get(owner)
        return None if s is None else s.notify_defaults

    def secret(self, owner: str) -> bytes | None:
        """The secret set for the owner (through the API, else in the node's file)."""
        return self._secrets.get(owner)

    def load(self, records: list[OwnerSettings], opened: Mapping[str, str]) -> None:
        """Replaces what is held: ``records`` as read, ``opened`` their secrets opened."""
        self._settings = {s.owner: s for s in records}
        self._secrets = dict(self._file_secrets)
        self._secrets.update({owner: v.encode() for owner, v in opened.items() if v})

    def learn(self, settings: OwnerSettings, opened_secret: str) -> None:
        """One record this node just wrote."""
        self._settings[settings.owner] = settings
        if opened_secret:
            self._secrets[settings.owner] = opened_secret.encode()
        elif settings.owner in self._file_secrets:
            self._secrets[settings.owner] = self._file_secrets[settings.owner]
        else:
            self._secrets.pop(settings.owner, None)
