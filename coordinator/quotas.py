"""Per-owner quotas and rate limits: the limits, read from TOML, and how a node keeps them.

The limits come from a TOML document (``--quota-file``; the same tables may sit in an
auth file) of this form::

    [quota.default]          # every owner without its own limits
    max_jobs = 100000
    creates_per_second = 200
    max_request_bytes = 4194304
    [quota.owner."team-a"]   # per owner; a key left out takes [quota.default]'s
    max_jobs = 500
    creates_per_second = 20
    burst = 40               # optional: creates at once; default one second's worth

- ``max_jobs``: how many jobs the owner may have that are not deleted
  (``JobStore.count_jobs``). A create that would pass it is refused whole. On one
  node it is never passed: an owner's creates are checked one at a time (a lock per
  owner around the count, the check and the reservation), and the count holds the
  creates this node has reserved and not yet written. Creates racing on several api
  nodes may pass it by what the others have in flight.
- ``creates_per_second`` and ``burst``: a token bucket per owner, **in memory on each
  api node**: with N api nodes an owner may create up to N times the rate, and a
  restarted node starts with a full bucket. A ``CreateJobs`` of n jobs takes n
  tokens; a batch larger than the burst can never pass and says so.
- ``max_request_bytes``: the size of any JobService request of the owner.

A refusal raises ``ResourceExhausted`` (RESOURCE_EXHAUSTED) whose message starts with
the limit's name, and changes nothing. With no file, ``DEFAULT_QUOTA`` applies: no
stricter than what a node takes anyway (4 MiB messages, 10,000 jobs per call).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import time
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardcron.client import limits
from shardcron.client.errors import ResourceExhausted

MAX_MESSAGE_BYTES = 4 << 20  # what a node takes in one message (service.MAX_MESSAGE_BYTES)
# How long a node reuses an owner's job count (plus its own creates since): creates do
# not each read the store, and a count may miss the last second's deletes elsewhere.
COUNT_REUSE_SECONDS = 1.0
# Owners a node keeps a bucket and a count for before it forgets the idle ones (a full
# bucket, a count too old to reuse: forgetting them changes nothing), so that callers
# naming ever new owners cannot grow its memory without bound.
MAX_TRACKED_OWNERS = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Quota:
    """One owner's limits; see the module docstring."""

    max_jobs: int
    creates_per_second: float
    burst: int  # tokens the bucket holds: creates allowed at once
    max_request_bytes: int


DEFAULT_QUOTA = Quota(
    max_jobs=10_000_000,
    creates_per_second=100_000.0,
    burst=100_000,  # a full CreateJobs batch (limits.MAX_BATCH) always fits
    max_request_bytes=MAX_MESSAGE_BYTES,
)
assert DEFAULT_QUOTA.burst >= limits.MAX_BATCH


@dataclass(frozen=True, slots=True, kw_only=True)
class Quotas:
    """The limits of every owner: its own, else ``default``."""

    default: Quota = DEFAULT_QUOTA
    owners: Mapping[str, Quota] = field(default_factory=dict)

    def for_owner(self, owner: str) -> Quota:
        return self.owners.get(owner, self.default)


class QuotaFileError(ValueError):
    """A quota table that cannot be used; the message names the table and key."""


_KEYS = ("max_jobs", "creates_per_second", "burst", "max_request_bytes")


def _number(table: Mapping[str, Any], key: str, where: str, *, whole: bool) -> float | None:
    if key not in table:
        return None
    value = table[key]
    ok = isinstance(value, int) if whole else isinstance(value, int | float)
    if isinstance(value, bool) or not ok or not math.isfinite(value) or value <= 0:
        kind = "a whole number" if whole else "a number"
        raise QuotaFileError(f"{where}.{key}: must be {kind} above 0, got {value!r}")
    return value


def _quota(table: Any, where: str, base: Quota) -> Quota:
    if not isinstance(table, Mapping):
        raise QuotaFileError(f"{where}: must be a table")
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise QuotaFileError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(_KEYS)})")
    rate = _number(table, "creates_per_second", where, whole=False)
    burst = _number(table, "burst", where, whole=True)
    if burst is None:  # one second's worth of a rate set here, else the base's burst
        burst = max(1, math.ceil(rate)) if rate is not None else base.burst
    changes = {
        "max_jobs": _number(table, "max_jobs", where, whole=True),
        "creates_per_second": rate,
        "burst": burst,
        "max_request_bytes": _number(table, "max_request_bytes", where, whole=True),
    }
    return dataclasses.replace(base, **{k: v for k, v in changes.items() if v is not None})


def quotas_from_toml(document: Mapping[str, Any]) -> Quotas:
    """The quotas of a parsed TOML document (its ``[quota]`` tables; none: the defaults).
    Raises ``QuotaFileError`` naming the table and key of a bad value."""
    section = document.get("quota", {})
    if not isinstance(section, Mapping):
        raise QuotaFileError("quota: must be a table")
    unknown = sorted(set(section) - {"default", "owner"})
    if unknown:
        raise QuotaFileError(f"quota: unknown table {unknown[0]!r} (known: default, owner)")
    default = DEFAULT_QUOTA
    if "default" in section:
        default = _quota(section["default"], "quota.default", DEFAULT_QUOTA)
    owners = section.get("owner", {})
    if not isinstance(owners, Mapping):
        raise QuotaFileError("quota.owner: must hold one table per owner")
    return Quotas(
        default=default,
        owners={
            name: _quota(table, f'quota.owner."{name}"', default) for name, table in owners.items()
        },
    )


def load_quotas(path: str | Path) -> Quotas:
    """The quotas of a TOML file; raises ``QuotaFileError`` (or OSError) saying why not."""
    try:
        document = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise QuotaFileError(f"{path}: not TOML: {e}") from None
    try:
        return quotas_from_toml(document)
    except QuotaFileError as e:
        raise QuotaFileError(f"{path}: {e}") from None


@dataclass(slots=True)
class TokenBucket:
    """``rate`` tokens a second, up to ``burst`` held; starts full."""

    rate: float
    burst: int
    tokens: float
    at: float  # when ``tokens`` was counted (monotonic seconds)

    def take(self, n: int, now: float) -> bool:
        """Takes ``n`` tokens if the bucket holds them at ``now``; else takes none."""
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.at) * self.rate)
        self.at = max(self.at, now)
        if n > self.tokens:
            return False
        self.tokens -= n
        return True

    def full_at(self) -> float:
        """When the bucket is full again if nothing takes from it."""
        return self.at + (self.burst - self.tokens) / self.rate


class OwnerLocks:
    """An ``asyncio.Lock`` per owner, held only while some call holds or waits for it:
    an owner's entry goes with its last call, so callers naming ever new owners leave
    nothing behind."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # owner -> (lock, users)

    def __len__(self) -> int:
        return len(self._locks)

    @contextlib.asynccontextmanager
    async def hold(self, owner: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(owner) or (asyncio.Lock(), 0)
        self._locks[owner] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[owner]
            if users == 1:
                del self._locks[owner]
            else:
                self._locks[owner] = (lock, users - 1)


class QuotaGuard:
    """Keeps the quotas of one api node: the request size, the create rate (a bucket per
    owner, in memory) and the owner's job count (read from the store at most every
    ``COUNT_REUSE_SECONDS``, plus this node's creates since).

    ``check_creates`` reserves the creates it allows; the caller ends each reservation
    with ``creates_ended``, saying how many of them were not made."""

    def __init__(
        self,
        quotas: Quotas,
        count_jobs: Callable[[str], Awaitable[int]],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.quotas = quotas
        self._count_jobs = count_jobs
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self._counts: dict[str, tuple[int, float]] = {}  # owner -> (jobs, counted at)
        # owner -> creates reserved and not yet ended: jobs a store count may not hold
        self._writing: dict[str, int] = {}
        self._locks = OwnerLocks()

    def reload(self, quotas: Quotas) -> None:
        """New limits; every bucket starts again full under them."""
        self.quotas = quotas
        self._buckets.clear()
        self._counts.clear()

    def check_request(self, owner: str, size: int) -> None:
        limit = self.quotas.for_owner(owner).max_request_bytes
        if size > limit:
            raise ResourceExhausted(
                f"max_request_bytes: the request is {size} bytes, over the {limit} bytes"
                f" owner {owner} may send"
            )

    async def check_creates(self, owner: str, count: int) -> None:
        """Refuses ``count`` new jobs of ``owner`` that pass its create rate or job limit;
        takes the tokens and reserves the jobs only when both allow them."""
        quota = self.quotas.for_owner(owner)
        if count > quota.burst:
            raise ResourceExhausted(
                f"creates_per_second: {count} creates in one call, over the burst of"
                f" {quota.burst} owner {owner} may make at once: send fewer per call"
            )
        # one check at a time per owner: two checks awaiting the same count would each
        # allow what only one of them may have
        async with self._locks.hold(owner):
            now = self._clock()
            bucket = self._bucket(owner, quota, now)
            if not bucket.take(count, now):
                raise ResourceExhausted(
                    f"creates_per_second: owner {owner} may create {quota.creates_per_second:g}"
                    " jobs a second; retry later"
                )
            try:
                held, counted_at = await self._held(owner, now)
            except BaseException:
                bucket.tokens += count
                raise
            if held + count > quota.max_jobs:
                bucket.tokens += count  # refused: the tokens go back
                self._counts.pop(owner, None)  # a refusal counts afresh next time
                raise ResourceExhausted(
                    f"max_jobs: owner {owner} has {held} jobs and may have {quota.max_jobs};"
                    " delete some first"
                )
            self._counts[owner] = (held + count, counted_at)
            self._writing[owner] = self._writing.get(owner, 0) + count

    def creates_ended(self, owner: str, reserved: int, not_made: int) -> None:
        """Ends a reservation of ``check_creates``: its ``reserved`` jobs are written or
        never will be, and ``not_made`` of them are not jobs (the create failed before
        its write, or an idempotency key named a job already made): they leave the
        count. A write that raised may have landed: its jobs stay counted until the
        count is next read from the store."""
        writing = self._writing.get(owner, 0) - reserved
        if writing > 0:
            self._writing[owner] = writing
        else:
            self._writing.pop(owner, None)
        counted = self._counts.get(owner)
        if not_made and counted is not None:
            self._counts[owner] = (max(0, counted[0] - not_made), counted[1])

    def _bucket(self, owner: str, quota: Quota, now: float) -> TokenBucket:
        bucket = self._buckets.get(owner)
        if bucket is None or (bucket.rate, bucket.burst) != (
            quota.creates_per_second,
            quota.burst,
        ):
            bucket = TokenBucket(
                rate=quota.creates_per_second, burst=quota.burst, tokens=quota.burst, at=now
            )
            self._forget_idle(now)
            self._buckets[owner] = bucket
        return bucket

    async def _held(self, owner: str, now: float) -> tuple[int, float]:
        """The owner's jobs, as counted at ``now`` or reused, with when they were counted.
        The creates being written are taken before the store is read: one that ends
        meanwhile is in the store's count, or counted twice until the next read."""
        counted = self._counts.get(owner)
        if counted is not None and now - counted[1] <= COUNT_REUSE_SECONDS:
            return counted
        writing = self._writing.get(owner, 0)
        return await self._count_jobs(owner) + writing, now

    def _forget_idle(self, now: float) -> None:
        """Past ``MAX_TRACKED_OWNERS``: drops full buckets and counts too old to reuse;
        if that is not enough, every bucket and count (each starts afresh: full, and
        read from the store)."""
        if len(self._buckets) < MAX_TRACKED_OWNERS and len(self._counts) < MAX_TRACKED_OWNERS:
            return
        self._buckets = {o: b for o, b in self._buckets.items() if b.full_at() > now}
        self._counts = {o: c for o, c in self._counts.items() if now - c[1] <= COUNT_REUSE_SECONDS}
        if len(self._buckets) >= MAX_TRACKED_OWNERS:
            self._buckets.clear()
        if len(self._counts) >= MAX_TRACKED_OWNERS:
            self._counts.clear()
