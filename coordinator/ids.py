"""Identifiers and placement: time-ordered ids, shard and bucket of a run.

Ids are time-ordered (a 48-bit millisecond prefix, as in UUIDv7) because random
keys scatter B-tree and SSTable inserts (docs/benchmarks.md, "Time-ordered ids").
Run ids are also deterministic
— the same job, fire and attempt always give the same id — so materialising a
fire twice (after a crash, or by two pollers during a hand-over) writes one row.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime

_RANDOM_BYTES = 8  # 64 bits drawn per id; 62 of them are kept
_COUNTER_MAX = 0xFFF  # the 12 bits after the version count ids within one millisecond
_last = (0, 0)  # (milliseconds, counter) of this process's newest id: ids only ascend
_HEX = frozenset("0123456789abcdefABCDEF")
_NOISE = (1 << 62) - 1  # the random bits of a job id
PLACE_TRIES = 16  # draws of a placed id's random bits (``placed_job_id``)


def new_job_id() -> str:
    return new_job_ids(1)[0]


def new_job_ids(count: int) -> list[str]:
    """``count`` UUIDv7s (RFC 9562), ascending: 48 bits of milliseconds, a 12-bit counter
    of the ids made within that millisecond (past 4,096 the next millisecond is
    borrowed), then 62 random bits. The random bits of all of them come from one
    ``os.urandom`` call: one system call per id was a tenth of the api's work on a
    batch create."""
    global _last
    noise = os.urandom(_RANDOM_BYTES * count)
    now = time.time_ns() // 1_000_000
    millis, counter = _last
    ids = []
    for i in range(count):
        if now > millis:
            millis, counter = now, 0
        elif counter < _COUNTER_MAX:
            counter += 1
        else:
            millis, counter = millis + 1, 0
        rand = int.from_bytes(noise[i * _RANDOM_BYTES : (i + 1) * _RANDOM_BYTES], "big")
        value = (millis & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64
        value |= 0x2 << 62 | rand & _NOISE
        ids.append(_uuid_text(value))
    _last = (millis, counter)
    return ids


def placed_job_id(
    job_id: str, wanted: Callable[[int], bool], shard_count: int, tries: int = PLACE_TRIES
) -> str:
    """``job_id`` (from ``new_job_ids``), its 62 random bits drawn again until its shard
    (``shard_for``) is one ``wanted`` accepts. The instant and the counter stay, so the
    ids of this process still ascend and differ. ``job_id`` as given when it is
    accepted already, or when no draw of ``tries`` is."""
    if wanted(shard_for(job_id, shard_count)):
        return job_id
    head = int(job_id.replace("-", ""), 16) & ~_NOISE
    noise = os.urandom(_RANDOM_BYTES * tries)
    for i in range(tries):
        rand = int.from_bytes(noise[i * _RANDOM_BYTES : (i + 1) * _RANDOM_BYTES], "big")
        candidate = _uuid_text(head | rand & _NOISE)
        if wanted(shard_for(candidate, shard_count)):
            return candidate
    return job_id


def run_id(job_id: str, fire_key: str, attempt: int, due_at: datetime) -> str:
    """A UUIDv8: 48 bits of due time (ms), then 74 bits of a hash of (job, fire, attempt).

    Ids are stored, so this is the layout for good (a test pins values): the 80-bit
    hash follows the time, its first 4 bits replaced by the version (8) and its 17th
    and 18th by the variant (binary 10). Built as bytes: a run id is made per run."""
    millis = int(due_at.timestamp() * 1000) & ((1 << 48) - 1)
    digest = hashlib.blake2b(f"{job_id}|{fire_key}|{attempt}".encode(), digest_size=10).digest()
    raw = bytearray(millis.to_bytes(6, "big") + digest)
    raw[6] = 0x80 | (raw[6] & 0x0F)  # version 8
    raw[8] = 0x80 | (raw[8] & 0x3F)  # RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _uuid_text(value: int) -> str:
    """What ``str(uuid.UUID(int=value))`` gives, without building the ``UUID`` (it checks
    and stores the value first): an id is made for every job, and every run."""
    h = value.to_bytes(16, "big").hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def run_due_at(run_id: str) -> datetime | None:
    """The due instant, to the millisecond, that a run id begins with (``run_id``); None
    if the text is not shaped as a run id."""
    head = run_id[:8] + run_id[9:13]
    if len(run_id) != 36 or run_id[8] != "-" or not _HEX.issuperset(head):
        return None
    try:
        return datetime.fromtimestamp(int(head, 16) / 1000, UTC)
    except (OverflowError, ValueError, OSError):  # past the year 9999
        return None


def shard_for(job_id: str, shard_count: int) -> int:
    """Stable shard of a job: every run of a job lives in one shard, so one poller owns it."""
    digest = hashlib.blake2b(job_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shard_count


def bucket_for(due_at: datetime, bucket_seconds: int) -> int:
    """The due-index time bucket: due time truncated to bucket_seconds, as epoch seconds."""
    seconds = int(due_at.timestamp())
    return seconds - seconds % bucket_seconds


def utcnow() -> datetime:
    return datetime.now(UTC)
