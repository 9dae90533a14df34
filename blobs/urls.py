"""A blob store from its URL: ``file:///path`` or ``s3://bucket/prefix``.

``blob_store_for(url, options)`` makes the store a URL names (unopened);
``open_blob_store`` makes it and opens it. A URL or an option that cannot work
raises ``ValueError`` naming the field, before anything is opened. An S3 store's
options are ``s3_options.BlobStoreOptions``.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

from shardcron.blobs.errors import InvalidBlobKey
from shardcron.blobs.files import FileBlobStore
from shardcron.blobs.keys import check_store_prefix
from shardcron.blobs.s3_options import (
    ENV_ACCESS_KEY_FILE,
    ENV_SECRET_KEY_FILE,
    BlobStoreOptions,
)
from shardcron.blobs.store import BlobStore

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def blob_store_for(url: str, options: BlobStoreOptions | None = None) -> BlobStore:
    """The store ``url`` names, not opened yet."""
    options = options or BlobStoreOptions()
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if parts.query or parts.fragment:
        raise ValueError(
            "blob store URL: takes no query or fragment (options and credentials go in"
            " flags, the environment and files)"
        )
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(
                f"blob store URL: host: a file:// URL names no host, got {parts.netloc!r}"
                " (file:///var/lib/shardcron/blobs: three slashes, an absolute path)"
            )
        path = unquote(parts.path)
        if not path.startswith("/") or path.rstrip("/") == "":
            raise ValueError(f"blob store URL: path: an absolute directory path, not {path!r}")
        if extra := options.s3_options_set:
            raise ValueError(f"{', '.join(extra)}: only an s3:// store takes it")
        return FileBlobStore(path)
    if scheme == "s3":
        if "@" in parts.netloc or ":" in parts.netloc:
            raise ValueError(
                "blob store URL: credentials and ports do not go in an s3:// URL: name the"
                f" service with the endpoint option, the keys with {ENV_ACCESS_KEY_FILE} and"
                f" {ENV_SECRET_KEY_FILE}"
            )
        bucket = parts.netloc
        if not _BUCKET.fullmatch(bucket) or ".." in bucket:
            raise ValueError(
                f"blob store URL: bucket: {bucket!r} is not 3-63 lowercase letters, digits,"
                " '.' and '-'"
            )
        try:
            prefix = check_store_prefix(unquote(parts.path), "prefix")
        except InvalidBlobKey as e:
            raise ValueError(f"blob store URL: prefix: {e.reason}") from None
        from shardcron.blobs.s3 import S3BlobStore  # its client library only when used

        return S3BlobStore(bucket, prefix, options)
    raise ValueError(
        f"blob store URL: scheme: {parts.scheme or '(none)'!r} is not file or s3"
        " (file:///path, s3://bucket/prefix)"
    )


async def open_blob_store(url: str, options: BlobStoreOptions | None = None) -> BlobStore:
    """The store ``url`` names, opened."""
    store = blob_store_for(url, options)
    await store.open()
    return store
