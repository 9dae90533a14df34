"""The alphabet of blob keys, checked at the edge of the seam before any I/O.

A key is at most ``MAX_KEY`` (768) characters: segments joined by ``/``, each
segment 1 to ``MAX_SEGMENT`` (255, a file name's limit) characters of ASCII letters,
digits, ``.``, ``_``, ``-`` and ``@``, starting with a letter or a digit. So no key
has an empty segment (no leading, trailing or doubled ``/``), a ``.`` or ``..``
segment, a hidden file's name, a backslash, a NUL or any character an S3 service or
a file system reads differently: a key names the same object on S3 and the same
file under a ``FileBlobStore``'s root, which it can never leave. 768 leaves room,
within S3's 1,024 bytes, for the prefix of an ``s3://bucket/prefix`` store (at most
``MAX_STORE_PREFIX``).

A *prefix* (what ``list`` and ``delete_prefix`` take) is the start of a key: empty,
or whole segments each followed by ``/``, then possibly the start of one more
segment. ``delete_prefix`` takes only a *folder*: a non-empty prefix that ends with
``/``, so that deleting ``output/al/`` can never touch ``output/alice/``.

Which keys callers build (one owner's blobs apart from another's) is
``shardcron.blobs.layout``.
"""

from __future__ import annotations

import base64
import re

from shardcron.blobs.errors import InvalidBlobKey
from shardcron.client.limits import clip

MAX_KEY = 768
MAX_SEGMENT = 255
MAX_STORE_PREFIX = 200
MAX_PAGE_TOKEN = 1400  # the base64 of an S3 key (1,024 bytes): the last a page listed

SEGMENT_CHARACTERS = "ASCII letters, digits, '.', '_', '-' and '@', starting with a letter or digit"
_SEGMENT = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._@-]{{0,{MAX_SEGMENT - 1}}}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def is_segment(name: str) -> bool:
    """True when ``name`` is one segment of the alphabet (what a store's listing keeps)."""
    return _SEGMENT.fullmatch(name) is not None


def is_key(key: str) -> bool:
    """True when ``key`` is a key of the alphabet (what an S3 listing keeps)."""
    try:
        check_key(key)
    except InvalidBlobKey:
        return False
    return True


def check_segment(segment: str, field: str, *, limit: int = MAX_SEGMENT) -> str:
    """``segment`` if it is one segment of at most ``limit`` characters (no ``/``)."""
    if len(segment) > limit or not _SEGMENT.fullmatch(segment):
        raise InvalidBlobKey(
            field, f"{clip(segment)!r} is not 1-{limit} {SEGMENT_CHARACTERS} (and no '/')"
        )
    return segment


def check_sha256(digest: str, field: str = "sha256") -> str:
    """``digest`` if it is a sha256 as hex: 64 lowercase hex digits."""
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise InvalidBlobKey(field, f"{clip(str(digest))!r} is not 64 lowercase hex digits")
    return digest


def check_key(key: str, field: str = "key") -> str:
    """``key`` if it is a key of the alphabet above; else ``InvalidBlobKey`` naming ``field``."""
    if not isinstance(key, str):
        raise InvalidBlobKey(field, f"must be a string, got {type(key).__name__}")
    if not key:
        raise InvalidBlobKey(field, "must not be empty")
    if len(key) > MAX_KEY:
        raise InvalidBlobKey(field, f"at most {MAX_KEY} characters, got {len(key)}")
    for segment in key.split("/"):
        if not _SEGMENT.fullmatch(segment):
            raise InvalidBlobKey(
                field,
                f"{clip(key)!r}: segment {clip(segment)!r} is not 1-{MAX_SEGMENT}"
                f" {SEGMENT_CHARACTERS}",
            )
    return key


def check_prefix(prefix: str, field: str = "prefix") -> str:
    """``prefix`` if it is empty or the start of a key (it may end with ``/``)."""
    if not isinstance(prefix, str):
        raise InvalidBlobKey(field, f"must be a string, got {type(prefix).__name__}")
    if prefix:
        check_key(prefix[:-1] if prefix.endswith("/") else prefix, field)
    return prefix


def check_folder(prefix: str, field: str = "prefix") -> str:
    """``prefix`` if it is a non-empty prefix ending with ``/``: whole segments only."""
    if not isinstance(prefix, str) or not prefix.endswith("/"):
        raise InvalidBlobKey(field, f"{clip(str(prefix))!r} must end with '/' (whole segments)")
    return check_prefix(prefix, field)


def encode_page_token(last_key: str) -> str:
    """The opaque token of a page that ended at ``last_key`` (which may be an object
    the seam did not write): the key, base64url-encoded."""
    return base64.urlsafe_b64encode(last_key.encode()).decode().rstrip("=")


def decode_page_token(token: str) -> str:
    """The key an ``encode_page_token`` token names (``""`` for ``""``): a listing goes on after it."""
    if not isinstance(token, str) or len(token) > MAX_PAGE_TOKEN:
        raise InvalidBlobKey("page_token", "not a token this store returned")
    try:
        padded = token + "=" * (-len(token) % 4)
        return base64.b64decode(padded, altchars=b"-_", validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        raise InvalidBlobKey("page_token", "not a token this store returned") from None


def check_store_prefix(prefix: str, field: str = "prefix") -> str:
    """The prefix under which an S3 store keeps its keys, as ``a/b/`` (or ``""``): whole
    segments, at most ``MAX_STORE_PREFIX`` characters."""
    prefix = prefix.strip("/")
    if not prefix:
        return ""
    if len(prefix) >= MAX_STORE_PREFIX:
        raise InvalidBlobKey(field, f"at most {MAX_STORE_PREFIX - 1} characters")
    return check_key(prefix, field) + "/"
