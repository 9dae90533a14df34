"""Who is calling, and for which owner: ``authorize``, the one resolution function.

``authorize(table, method, metadata, cert_subjects)`` takes what any transport knows
of a call (the full method name, its headers as a mapping with lower-case keys, and
the subjects of the client certificate the transport verified) and returns the
``Caller`` or raises:

- ``Unauthenticated``: no credential, a malformed ``authorization`` header, or a token
  or certificate no principal has. A bearer token is compared by its SHA-256 digest,
  with ``hmac.compare_digest`` against every principal's. A call with a token is
  judged by its token alone, never by its certificate as well.
- ``PermissionDenied``: the method is open to no one; or, as ``PrincipalDenied``
  naming the principal, its role may not call the method (``permissions``), or it
  names an owner it may not act for.
- ``InvalidArgument``: a malformed ``x-shardcron-owner``, or none from a principal of
  several owners (it must choose).

The owner comes from the credential: a principal with one owner acts as it with or
without the header; one with several picks with the header; an admin, or a principal
with ``"*"``, acts for the owner the header names (``default`` without one, as a
node without an auth file does). Servicers read the result through
``current_caller()``, set for the call by the gRPC interceptor.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from shardcron.client.errors import InvalidArgument, PermissionDenied, Unauthenticated
from shardcron.client.types import DEFAULT_OWNER, OWNER_HEADER
from shardcron.coordinator.auth.permissions import OWNER_SCOPED, Access, access_of, allowed
from shardcron.coordinator.auth.principals import (
    ANY_OWNER,
    AuthTable,
    Principal,
    Role,
    normalize_subject,
)
from shardcron.coordinator.validation import validate_owner

AUTHORIZATION_KEY = "authorization"


@dataclass(frozen=True, slots=True, kw_only=True)
class Caller:
    """The principal behind one call and the owner it acts for.

    ``owner`` is "" for a method that acts for no owner; ``role`` is None only for a
    public method called without a credential."""

    principal: str
    role: Role | None
    owner: str
    owners: frozenset[str]  # what the credential allows; ANY_OWNER: every owner

    @property
    def acts_for(self) -> frozenset[str] | None:
        """The owners this caller's credential lets it act for; None: every owner."""
        if self.role == Role.ADMIN or ANY_OWNER in self.owners:
            return None
        return self.owners

    @property
    def worker_pool(self) -> frozenset[str] | None:
        """The owners whose runs this caller may take as a worker; None: every owner."""
        return self.acts_for


class PrincipalDenied(PermissionDenied):
    """PERMISSION_DENIED for the principal the credential identified (``principal``)."""

    def __init__(self, principal: str, message: str) -> None:
        super().__init__(message)
        self.principal = principal


ANONYMOUS = Caller(principal="", role=None, owner="", owners=frozenset())

_current: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "shardcron_caller", default=None
)


def current_caller() -> Caller | None:
    """The caller of the call being served; None when the node runs without an auth file."""
    return _current.get()


def set_caller(caller: Caller) -> None:
    """Sets the caller for the rest of the current task (one call's own task)."""
    _current.set(caller)


def authorize(
    table: AuthTable,
    method: str,
    metadata: Mapping[str, str],
    cert_subjects: Collection[str] = (),
) -> Caller:
    """The caller of ``method``; raises as the module says."""
    access = access_of(method)
    if access is None:
        raise PermissionDenied(f"{method} is not open to any caller")
    if access == Access.PUBLIC:
        return ANONYMOUS
    principal = identify(table, metadata, cert_subjects)
    if not allowed(principal.role, access):
        raise PrincipalDenied(
            principal.name,
            f"principal {principal.name} (role {principal.role.value}) may not call {method}",
        )
    owner = resolve_owner(principal, metadata.get(OWNER_HEADER)) if access in OWNER_SCOPED else ""
    return Caller(
        principal=principal.name, role=principal.role, owner=owner, owners=principal.owners
    )


def still_allowed(table: AuthTable, caller: Caller) -> bool:
    """``caller``'s principal is in ``table`` with the same role and owners (a reloaded
    auth file may have removed or changed it)."""
    return any(
        p.name == caller.principal and p.role == caller.role and p.owners == caller.owners
        for p in table.principals
    )


def identify(
    table: AuthTable, metadata: Mapping[str, str], cert_subjects: Collection[str]
) -> Principal:
    """The principal whose credential the call carries; Unauthenticated if none."""
    header = metadata.get(AUTHORIZATION_KEY)
    if header is not None:
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("authorization: expected 'Bearer TOKEN'")
        digest = hashlib.sha256(token.encode("utf-8")).hexdigest()
        found: Principal | None = None
        for p in table.principals:  # every one compared: the time taken names none
            if p.token_sha256 and hmac.compare_digest(p.token_sha256, digest):
                found = p
        if found is None:
            raise Unauthenticated("the bearer token is not known to this node")
        return found
    subjects = {normalize_subject(s) for s in cert_subjects if s}
    if subjects:
        for p in table.principals:
            if p.cert_subject and p.cert_subject in subjects:
                return p
        raise Unauthenticated("the client certificate's subject is not known to this node")
    raise Unauthenticated(
        "no credential: send 'authorization: Bearer TOKEN' (--token, SHARDCRON_TOKEN)"
        " or a client certificate"
    )


def resolve_owner(principal: Principal, requested: str | None) -> str:
    """The owner a call of ``principal`` acts for, given the owner header (None: absent)."""
    if requested is not None:
        validate_owner(requested)
    if principal.any_owner:
        return requested or DEFAULT_OWNER
    if requested is None:
        if len(principal.owners) == 1:
            return next(iter(principal.owners))
        raise InvalidArgument(
            OWNER_HEADER,
            f"principal {principal.name} acts for several owners"
            f" ({', '.join(sorted(principal.owners))}): name one",
        )
    if requested not in principal.owners:
        raise PrincipalDenied(
            principal.name, f"principal {principal.name} may not act for owner {requested}"
        )
    return requested
