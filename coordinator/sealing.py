"""Secret env values sealed at rest: AES-256-GCM under keys from a key file.

With ``--secrets-key-file`` a node seals each ``secret_env`` value of a create or an
update before it is stored, and only the poller opens them, at the moment it leases a
run to a worker (``KeyRing.opened_task``); the store, its backups and every reply hold
``sealed:v1:<key id>:<base64url(nonce | ciphertext | tag)>``, never the value. The
value's variable name is the authenticated data, so a sealed value moved to another
name does not open.

The key file: one key per line, ``KEY_ID BASE64_OF_32_BYTES``; ``#`` starts a comment.
The first key seals; every key opens, so a key is rotated by putting a new one first
and keeping the old ones until no stored value needs them (a job's values are sealed
again with the first key at its next update). Every node of a cluster needs the same
file. A value a node cannot open (its key is not in the file, or the value was
altered) fails the run that needs it, naming the variable and the key id; it never
reaches a worker.

Without a key file values are stored as given (``KeyRing`` absent: nothing is sealed
or opened); values stored before a key file was given stay as they were until their
job is updated. A value sent by a user may not look sealed (``refuse_sealed_form``).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import logging
import os
import re
import stat
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from shardcron.client.errors import FailedPrecondition, InvalidArgument
from shardcron.client.limits import clip
from shardcron.client.types import CommandTask, JobSpec, Task

log = logging.getLogger(__name__)

SEALED_PREFIX = "sealed:v1:"
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,32}")
_KEY_BYTES = 32
_NONCE_BYTES = 12
_AAD = b"shardcron secret_env\0"


class KeyFileError(ValueError):
    """The key file cannot be used; the message names the line."""


class SecretUnopenable(FailedPrecondition):
    """A stored secret value this node cannot open: its run fails with this text."""


def is_sealed(value: str) -> bool:
    return value.startswith(SEALED_PREFIX)


def refuse_sealed_form(name: str, value: str, field: str) -> None:
    """A value a user sends may not look sealed: it would be kept as if stored sealed."""
    if is_sealed(value):
        raise InvalidArgument(
            f"{field}.task.command.secret_env[{clip(name)}]",
            f"a value may not begin with {SEALED_PREFIX!r} (the form a stored value is sealed in)",
        )


@dataclass(frozen=True, slots=True)
class KeyRing:
    """The keys of a key file: ``sealing_id`` seals, every key opens."""

    keys: dict[str, AESGCM]
    sealing_id: str
    path: str = ""  # the file it was read from

    def seal(self, name: str, value: str) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self.keys[self.sealing_id].encrypt(nonce, value.encode(), _AAD + name.encode())
        text = base64.urlsafe_b64encode(nonce + sealed).rstrip(b"=").decode()
        return f"{SEALED_PREFIX}{self.sealing_id}:{text}"

    def open(self, name: str, value: str) -> str:
        """The value of a sealed ``value``; a value not sealed is returned as it is.
        Raises ``SecretUnopenable`` naming the variable and the key id."""
        if not is_sealed(value):
            return value
        key_id, _, text = value[len(SEALED_PREFIX) :].partition(":")
        key = self.keys.get(key_id)
        if key is None:
            raise SecretUnopenable(
                f"secret_env[{clip(name)}] is sealed with key {clip(key_id)!r}, "
                "which this node's --secrets-key-file does not hold"
            )
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            opened = key.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _AAD + name.encode())
            return opened.decode()
        except (InvalidTag, ValueError, binascii.Error) as e:
            raise SecretUnopenable(
                f"secret_env[{clip(name)}] does not open with key {key_id!r}: "
                "the stored value was altered or belongs to another variable"
            ) from e

    def sealed_spec(self, spec: JobSpec) -> JobSpec:
        """``spec`` with every secret value not sealed yet sealed with the first key."""
        task = spec.task
        if not isinstance(task, CommandTask) or not task.secret_env:
            return spec
        if all(is_sealed(v) for v in task.secret_env.values()):
            return spec
        env = {k: v if is_sealed(v) else self.seal(k, v) for k, v in task.secret_env.items()}
        return spec.replace(task=dataclasses.replace(task, secret_env=env))

    def opened_spec(self, spec: JobSpec) -> JobSpec:
        """``spec`` with the values this ring can open opened, the others left sealed
        (for merging an update: those stay as they are stored)."""
        task = spec.task
        if not isinstance(task, CommandTask) or not any(map(is_sealed, task.secret_env.values())):
            return spec
        env = {}
        for k, v in task.secret_env.items():
            try:
                env[k] = self.open(k, v)
            except SecretUnopenable:
                env[k] = v
        return spec.replace(task=dataclasses.replace(task, secret_env=env))


def opened_task(ring: KeyRing | None, task: Task) -> Task:
    """``task`` as a worker gets it: every secret value opened. Raises
    ``SecretUnopenable`` for a sealed value without a ring that opens it."""
    if not isinstance(task, CommandTask) or not any(map(is_sealed, task.secret_env.values())):
        return task
    if ring is None:
        name = next(k for k, v in task.secret_env.items() if is_sealed(v))
        raise SecretUnopenable(
            f"secret_env[{clip(name)}] is sealed, and this node has no --secrets-key-file"
        )
    env = {k: ring.open(k, v) for k, v in task.secret_env.items()}
    return dataclasses.replace(task, secret_env=env)


def load_key_ring(path: str) -> KeyRing:
    """The keys of the file at ``path``; raises ``KeyFileError`` naming the line, or
    OSError. Logs a warning when others than its owner may read it."""
    with open(path, encoding="utf-8") as f:
        mode = os.fstat(f.fileno()).st_mode
        lines = f.read().splitlines()
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("%s may be read by others than its owner: chmod 600 it", path)
    keys: dict[str, AESGCM] = {}
    first = ""
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        where = f"{path} line {number}"
        if len(words) != 2:
            raise KeyFileError(f"{where}: want 'KEY_ID BASE64_KEY', got {len(words)} words")
        key_id, text = words
        if not _KEY_ID.fullmatch(key_id):
            raise KeyFileError(f"{where}: key id: 1-32 of A-Z a-z 0-9 . _ -")
        if key_id in keys:
            raise KeyFileError(f"{where}: key id {key_id!r} is given twice")
        try:
            raw = base64.b64decode(text, validate=True)
        except binascii.Error as e:
            raise KeyFileError(f"{where}: key {key_id!r} is not base64") from e
        if len(raw) != _KEY_BYTES:
            raise KeyFileError(
                f"{where}: key {key_id!r} is {len(raw)} bytes, want {_KEY_BYTES} "
                "(openssl rand -base64 32)"
            )
        keys[key_id] = AESGCM(raw)
        first = first or key_id
    if not keys:
        raise KeyFileError(f"{path}: no key (want lines of 'KEY_ID BASE64_KEY')")
    return KeyRing(keys=keys, sealing_id=first, path=path)
