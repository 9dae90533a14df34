"""Authentication and authorization of every call a node serves.

``principals`` (who: the auth file and its loading), ``permissions`` (which role may
call which method: one table, every RPC), ``authorize`` (the one resolution function,
for any transport: method, headers and certificate in, ``Caller`` out) and
``interceptor`` (the gRPC server's use of it, and the auth file reloaded on SIGHUP),
``refusals`` (every refused credential counted, and audited within a per-peer bound).
Without an auth file no interceptor is installed and every caller is trusted, as
``shardcron dev`` always was.
"""

from shardcron.coordinator.auth.authorize import (
    ANONYMOUS,
    Caller,
    PrincipalDenied,
    authorize,
    current_caller,
    still_allowed,
)
from shardcron.coordinator.auth.interceptor import AuthInterceptor, AuthSource
from shardcron.coordinator.auth.permissions import METHOD_ACCESS, ROLE_GRANTS, Access
from shardcron.coordinator.auth.principals import (
    ANY_OWNER,
    AuthFileError,
    AuthTable,
    Principal,
    Role,
    load_auth_file,
    parse_auth_file,
)
from shardcron.coordinator.auth.refusals import RefusalAudit, is_refusal

__all__ = [
    "ANONYMOUS",
    "ANY_OWNER",
    "METHOD_ACCESS",
    "ROLE_GRANTS",
    "Access",
    "AuthFileError",
    "AuthInterceptor",
    "AuthSource",
    "AuthTable",
    "Caller",
    "Principal",
    "PrincipalDenied",
    "RefusalAudit",
    "Role",
    "authorize",
    "current_caller",
    "is_refusal",
    "load_auth_file",
    "parse_auth_file",
    "still_allowed",
]
