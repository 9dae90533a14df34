"""Who may call a node: the principals of an auth file, and how the file is read.

An auth file is TOML, one ``[[principal]]`` table per principal::

    [[principal]]
    name = "alice"
    token_sha256 = "<hex sha256 of the bearer token>"   # or: cert_subject = "CN=alice"
    role = "writer"          # admin | writer | reader | worker | node
    owners = ["team-a"]      # owners it may act for (a worker: whose runs it takes); "*": all

``load_auth_file`` checks every field before anything is used: a file that does not
parse, or a principal with a missing, unknown or ill-typed field, raises
``AuthFileError`` naming the file, the line of the ``[[principal]]`` table and the
field. Names are unique, and so are token digests and certificate subjects: one
credential is one principal. A ``token_sha256`` that is the digest of the empty
string is refused: it would make an empty token a credential. ``admin`` and ``node`` principals need no ``owners``
(an admin acts for any owner; a node acts for none).

The same file may hold the per-owner quotas, as ``[quota.default]`` and
``[quota.owner."NAME"]`` tables (the form of ``coordinator.quotas``, checked the same
way): ``AuthTable.quotas``, which a node puts in force over ``--quota-file``'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import tomllib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from shardcron.client.errors import InvalidArgument
from shardcron.client.types import ANY_OWNER
from shardcron.coordinator.quotas import QuotaFileError, Quotas, quotas_from_toml
from shardcron.coordinator.validation import validate_owner

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# The digest of the empty token: a principal holding it would be one that a client
# sending an empty token (an unset SHARDCRON_TOKEN, a blank secret) becomes.
_EMPTY_TOKEN_SHA256 = hashlib.sha256(b"").hexdigest()
_PRINCIPAL_HEADER = re.compile(r"^\s*\[\[\s*principal\s*\]\]")
_UNESCAPED_COMMA = re.compile(r"(?<!\\),")
_FIELDS = frozenset({"name", "token_sha256", "cert_subject", "role", "owners"})


class Role(StrEnum):
    """What a principal may call (``permissions`` holds the table)."""

    ADMIN = "admin"  # every user-facing call, for any owner
    WRITER = "writer"  # create, change and read jobs and runs of its owners
    READER = "reader"  # read jobs and runs of its owners
    WORKER = "worker"  # WorkerService only: takes the runs of its owners
    NODE = "node"  # the internal node-to-node services only


@dataclass(frozen=True, slots=True, kw_only=True)
class Principal:
    """One credential and what it may do. ``owners`` holds ``ANY_OWNER`` for all."""

    name: str
    role: Role
    owners: frozenset[str]
    token_sha256: str = ""  # lower-case hex digest of the bearer token
    cert_subject: str = ""  # the verified client certificate's subject, e.g. "CN=alice"

    @property
    def any_owner(self) -> bool:
        return self.role == Role.ADMIN or ANY_OWNER in self.owners


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthTable:
    """The principals a node knows, as one auth file (plus the node's own) defines them."""

    principals: tuple[Principal, ...]
    source: str = ""  # where they were read from, for log lines
    quotas: Quotas | None = None  # the file's [quota.*] tables; None: it has none

    def with_principal(self, principal: Principal) -> AuthTable:
        """This table plus ``principal`` (a node's own, which no file reload removes)."""
        return dataclasses.replace(self, principals=(*self.principals, principal))


class AuthFileError(Exception):
    """An auth file that cannot be used; the message names the file, line and field."""


def normalize_subject(subject: str) -> str:
    """A certificate subject in one spelling, whatever the order and spacing of its
    parts: ``CN=alice, O=x``, ``O=x,CN=alice`` (openssl's order) and gRPC's
    ``CN=alice,O=x`` match. Escaped commas (``O=Acme\\, Inc``) stay inside their part."""
    parts = (part.strip() for part in _UNESCAPED_COMMA.split(subject))
    return ",".join(sorted(part for part in parts if part))


def load_auth_file(path: str | Path) -> AuthTable:
    """The principals of the auth file at ``path``; raises AuthFileError (see the module)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise AuthFileError(f"{path}: cannot read: {e}") from None
    return parse_auth_file(text, source=str(path))


def parse_auth_file(text: str, *, source: str = "auth file") -> AuthTable:
    """The principals of an auth file's ``text``; raises AuthFileError."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise AuthFileError(f"{source}: not valid TOML: {e}") from None
    unknown = sorted(set(data) - {"principal", "quota"})
    if unknown:
        raise AuthFileError(
            f"{source}: unknown table or key {unknown[0]!r} (only [[principal]] and [quota.*])"
        )
    try:
        quotas = quotas_from_toml(data) if "quota" in data else None
    except QuotaFileError as e:
        raise AuthFileError(f"{source}: {e}") from None
    entries = data.get("principal", [])
    if not isinstance(entries, list):
        raise AuthFileError(f"{source}: principal: must be an array of tables ([[principal]])")
    lines = [n for n, line in enumerate(text.splitlines(), 1) if _PRINCIPAL_HEADER.match(line)]
    principals: list[Principal] = []
    for i, entry in enumerate(entries):
        where = f"{source} line {lines[i]}" if i < len(lines) else source
        principals.append(_principal(entry, f"{where}, principal[{i}]"))
    _check_unique(principals, source)
    return AuthTable(principals=tuple(principals), source=source, quotas=quotas)


def _principal(entry: object, where: str) -> Principal:
    if not isinstance(entry, dict):
        raise AuthFileError(f"{where}: must be a table")
    unknown = sorted(set(entry) - _FIELDS)
    if unknown:
        raise AuthFileError(f"{where}: {unknown[0]}: unknown field")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise AuthFileError(f"{where}: name: must be a non-empty string")
    where = f"{where} ({name})"
    role_value = entry.get("role")
    try:
        role = Role(role_value)
    except ValueError:
        roles = ", ".join(r.value for r in Role)
        raise AuthFileError(f"{where}: role: {role_value!r} is not one of {roles}") from None
    token = entry.get("token_sha256", "")
    subject = entry.get("cert_subject", "")
    if not isinstance(token, str) or not isinstance(subject, str):
        raise AuthFileError(f"{where}: token_sha256 and cert_subject must be strings")
    token = token.strip().lower()
    if bool(token) == bool(subject.strip()):
        raise AuthFileError(f"{where}: give exactly one of token_sha256 and cert_subject")
    if token and not _SHA256_HEX.fullmatch(token):
        raise AuthFileError(
            f"{where}: token_sha256: must be 64 hex digits (sha256sum of the token), not the token"
        )
    if token == _EMPTY_TOKEN_SHA256:
        raise AuthFileError(f"{where}: token_sha256: is the digest of the empty token")
    return Principal(
        name=name,
        role=role,
        owners=_owners(entry.get("owners"), role, where),
        token_sha256=token,
        cert_subject=normalize_subject(subject),
    )


def _owners(value: object, role: Role, where: str) -> frozenset[str]:
    if value is None and role in (Role.ADMIN, Role.NODE):
        return frozenset({ANY_OWNER}) if role == Role.ADMIN else frozenset()
    if not isinstance(value, list) or not value or not all(isinstance(o, str) for o in value):
        raise AuthFileError(f'{where}: owners: must be a non-empty list of strings ("*": all)')
    for owner in value:
        if owner != ANY_OWNER:
            try:
                validate_owner(owner)
            except InvalidArgument as e:
                raise AuthFileError(f"{where}: owners: {owner!r}: {e.reason}") from None
    return frozenset(value)


def _check_unique(principals: list[Principal], source: str) -> None:
    seen: dict[tuple[str, str], str] = {}
    for p in principals:
        for kind, value in (
            ("name", p.name),
            ("token_sha256", p.token_sha256),
            ("cert_subject", p.cert_subject),
        ):
            if not value:
                continue
            if (kind, value) in seen:
                other = seen[(kind, value)]
                raise AuthFileError(
                    f"{source}: principals {other!r} and {p.name!r} have the same {kind}"
                )
            seen[(kind, value)] = p.name
