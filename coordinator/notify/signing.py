"""How a delivery is signed: ``X-Shardcron-Signature: sha256=<hex>``, HMAC-SHA256 over
the exact body bytes with the owner's secret; ``X-Shardcron-Delivery`` names the
delivery (receivers deduplicate on it) and ``X-Shardcron-Timestamp`` says when the
attempt was made (signed too: the signature covers ``<timestamp>.<body>``, so a
captured request cannot be replayed later as new).

The secrets are the node's ``--notify-secrets`` file (TOML, ``[secrets]`` owner =
"secret"), read at start and on no other occasion; an owner with none gets unsigned
deliveries (no signature header). The file is never echoed: it is write-only as a
command's ``secret_env`` is.
"""

from __future__ import annotations

import hashlib
import hmac
import tomllib
from collections.abc import Mapping
from pathlib import Path

SIGNATURE_HEADER = "X-Shardcron-Signature"
DELIVERY_HEADER = "X-Shardcron-Delivery"
TIMESTAMP_HEADER = "X-Shardcron-Timestamp"


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    """The header's value for ``body`` sent at ``timestamp`` (seconds since the epoch)."""
    mac = hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(secret: bytes, timestamp: str, body: bytes, header: str) -> bool:
    """What a receiver does (docs/notifications.md has it in a few lines)."""
    try:
        at = int(timestamp)
    except ValueError:
        return False
    return hmac.compare_digest(signature(secret, at, body), header)


def load_secrets(path: Path) -> dict[str, bytes]:
    """Owner -> secret from a TOML file's ``[secrets]`` table; ValueError naming the
    owner whose value is not a non-empty string."""
    with path.open("rb") as f:
        data = tomllib.load(f)
    table = data.get("secrets", {})
    if not isinstance(table, Mapping):
        raise ValueError(f'{path}: [secrets] must be a table of owner = "secret"')
    out = {}
    for owner, secret in table.items():
        if not isinstance(secret, str) or not secret:
            raise ValueError(f"{path}: secrets.{owner} must be a non-empty string")
        out[owner] = secret.encode()
    return out
