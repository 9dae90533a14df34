"""What a blob store raises: members of shardcron's one exception family.

Each is the domain error its gRPC status follows from (``shardcron.client.codec``'s
table), so an edge that serves blobs maps them with no table of its own:

- ``InvalidBlobKey`` (INVALID_ARGUMENT): a key, prefix or key part outside the
  alphabet of ``shardcron.blobs.keys``; ``field`` names which. Raised before any I/O.
- ``BlobNotFound`` (NOT_FOUND): no blob has that key.
- ``BlobRangeNotSatisfiable`` (INVALID_ARGUMENT, field ``range``): a read that starts
  past the end of the blob; ``size`` is the blob's size.
- ``BlobDigestMismatch`` (INVALID_ARGUMENT, field ``sha256``): a streamed write whose
  bytes are not the digest its caller announced; nothing was stored.
- ``BlobStoreUnavailable`` (UNAVAILABLE): the backing store failed: the file system
  (an ``OSError``: no space, permissions, I/O) or the S3 service (a refused or
  dropped connection, a timeout, a 5xx once botocore's retries are spent, a missing
  bucket, refused credentials). Its ``__cause__`` is the backend's own exception.
  Whether the operation took effect is unknown, as after any lost reply: every
  write of the seam may be repeated.
"""

from __future__ import annotations

from shardcron.client.errors import InvalidArgument, NotFound, Unavailable
from shardcron.client.limits import clip


class InvalidBlobKey(InvalidArgument):
    """A key (or prefix, page token, or part of a key) the seam refuses."""


class BlobNotFound(NotFound):
    def __init__(self, key: str) -> None:
        super().__init__(f"blob {clip(key, 200)} not found")
        self.key = key


class BlobRangeNotSatisfiable(InvalidArgument):
    def __init__(self, start: int, size: int) -> None:
        super().__init__("range", f"starts at byte {start}, past the end of a {size}-byte blob")
        self.start = start
        self.size = size


class BlobDigestMismatch(InvalidArgument):
    def __init__(self, expected: str, got: str) -> None:
        super().__init__("sha256", f"the bytes sent hash to {got}, not {expected}: not stored")


class BlobStoreUnavailable(Unavailable):
    """The backing store failed; ``__cause__`` holds its exception."""
