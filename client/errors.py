"""The one exception family of shardcron, shared by the SDK and the server.

Each error maps to one gRPC status code (``shardcron.client.codec`` holds the
table); the server raises these and the SDK raises them again on the other side.
"""

from __future__ import annotations

__all__ = [
    "AlreadyExists",
    "FailedPrecondition",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "ShardcronError",
    "StaleLease",
    "Unauthenticated",
    "Unavailable",
    "VersionConflict",
]


class ShardcronError(Exception):
    """Base of every error shardcron raises on purpose."""

    code = "UNKNOWN"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(ShardcronError):
    """Bad input: ``field`` names what is wrong, ``reason`` says why. Nothing changed."""

    code = "INVALID_ARGUMENT"

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class NotFound(ShardcronError):
    code = "NOT_FOUND"


class VersionConflict(ShardcronError):
    """An update carried an expected version that is no longer current."""

    code = "ABORTED"


class FailedPrecondition(ShardcronError):
    """The request is valid but the object is not in a state that allows it."""

    code = "FAILED_PRECONDITION"


class AlreadyExists(ShardcronError):
    code = "ALREADY_EXISTS"


class Unavailable(ShardcronError):
    code = "UNAVAILABLE"


class Unauthenticated(ShardcronError):
    """The call carries no credential the node knows (no token, a wrong one)."""

    code = "UNAUTHENTICATED"


class PermissionDenied(ShardcronError):
    """The caller is known, but its role or owners do not allow this call."""

    code = "PERMISSION_DENIED"


class ResourceExhausted(ShardcronError):
    """A quota or rate limit refused the call; the message starts with the limit's name
    (``"creates_per_second: ..."``). Nothing changed: retry later, or ask for more."""

    code = "RESOURCE_EXHAUSTED"


class StaleLease(ShardcronError):
    """A result or heartbeat carried a fencing token that no longer holds the run."""

    code = "FAILED_PRECONDITION"
