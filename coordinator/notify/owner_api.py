"""The api role's part of notifications: the create-time check of jobs' webhooks, the
listing of deliveries, and an owner's settings (``notify/settings``): read them, set the
default rules, set or remove the signing secret. Each call validates what it is given
before it writes (the default rules as a job's are, its webhook included), and the node
that writes a record has it in its ``OwnerSettingsBook`` at once."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from shardcron.client.errors import InvalidArgument
from shardcron.client.types import Delivery, JobSpec, NotifyPolicy, NotifySettings, Page
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.notify.addresses import check_webhook
from shardcron.coordinator.notify.settings import OwnerSettings, OwnerSettingsBook
from shardcron.coordinator.sealing import KeyRing, SecretUnopenable, is_sealed
from shardcron.coordinator.store import JobStore
from shardcron.coordinator.validation import optional_identifier, validate_notify

MIN_SECRET, MAX_SECRET = 16, 256


def secret_name(owner: str) -> str:
    """What a sealed secret is bound to: it opens as this owner's only."""
    return f"notify-secret:{owner}"


def opened_secret(keys: KeyRing | None, settings: OwnerSettings) -> str:
    """The owner's secret in clear; "" when none, or when this node cannot open it."""
    value = settings.notify_secret
    if keys is None or not is_sealed(value):
        return "" if is_sealed(value) else value
    try:
        return keys.open(secret_name(settings.owner), value)
    except SecretUnopenable:
        return ""


class NotifyApi:
    def __init__(
        self,
        store: JobStore,
        *,
        keys: KeyRing | None = None,
        allow_private: bool = False,
        book: OwnerSettingsBook | None = None,
    ) -> None:
        self._store = store
        self._keys = keys
        self._allow_private = allow_private
        self._book = book

    async def check_webhooks(self, specs: Sequence[tuple[JobSpec, Any]], *, single: bool) -> None:
        """Each webhook the specs name (each URL once) is one the node may call
        (``addresses.check_webhook``); InvalidArgument names ``spec.notify.webhook_url``,
        or ``jobs[i].spec...`` in a batch."""
        urls: dict[str, int] = {}
        for i, (spec, _) in enumerate(specs):
            if spec.notify is not None:
                urls.setdefault(spec.notify.webhook_url, i)
        for url, i in urls.items():
            field = "spec" if single else f"jobs[{i}].spec"
            await check_webhook(
                url, f"{field}.notify.webhook_url", allow_private=self._allow_private
            )

    async def list_deliveries(
        self, owner: str, *, job_id: str = "", page_size: int = 100, page_token: str = ""
    ) -> Page[Delivery]:
        optional_identifier(job_id, "job_id")
        return await self._store.list_deliveries(
            owner, job_id=job_id, page_size=page_size, page_token=page_token
        )

    async def get(self, owner: str) -> NotifySettings:
        return _view(await self._store.get_owner_settings(owner))

    async def set_defaults(self, owner: str, defaults: NotifyPolicy | None) -> NotifySettings:
        if defaults is not None:
            validate_notify(defaults, "defaults")
            await check_webhook(
                defaults.webhook_url, "defaults.webhook_url", allow_private=self._allow_private
            )
        return await self._change(owner, notify_defaults=defaults)

    async def set_secret(self, owner: str, secret: str) -> NotifySettings:
        if secret and not MIN_SECRET <= len(secret) <= MAX_SECRET:
            raise InvalidArgument("secret", f"{MIN_SECRET} to {MAX_SECRET} characters, or ''")
        if "\x00" in secret or is_sealed(secret):
            raise InvalidArgument("secret", "must not hold NUL or look sealed")
        stored = (
            secret
            if self._keys is None or not secret
            else self._keys.seal(secret_name(owner), secret)
        )
        return await self._change(owner, notify_secret=stored)

    async def _change(self, owner: str, **changes: object) -> NotifySettings:
        current = await self._store.get_owner_settings(owner) or OwnerSettings(owner=owner)
        changed = dataclasses.replace(current, updated_at=utcnow(), **changes)  # type: ignore[arg-type]
        await self._store.put_owner_settings(changed)
        if self._book is not None:
            self._book.learn(changed, opened_secret(self._keys, changed))
        return _view(changed)


async def refresh_book(store: JobStore, book: OwnerSettingsBook, keys: KeyRing | None) -> None:
    """Reads every owner's settings into ``book`` (at start, then every ``REFRESH``)."""
    records = await store.list_owner_settings()
    book.load(records, {s.owner: opened_secret(keys, s) for s in records})


def _view(settings: OwnerSettings | None) -> NotifySettings:
    if settings is None:
        return NotifySettings()
    return NotifySettings(
        defaults=settings.notify_defaults, secret_set=bool(settings.notify_secret)
    )
