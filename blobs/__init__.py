"""Blobs off the job table: a run's full output, its result files, jobs' code archives.

``store`` is the seam (the ``BlobStore`` Protocol and what it promises), ``keys`` the
alphabet every key is checked against, ``layout`` the keys callers build (the owner
in each), ``errors`` what the seam raises; ``files`` (``FileBlobStore``) and ``s3``
(``S3BlobStore``) implement it, and ``urls.open_blob_store`` makes either from a
``file:///path`` or ``s3://bucket/prefix`` URL. docs/blob-store.md says how to point
a node or a worker at one.

Both roles use it, so it imports nothing of ``shardcron.coordinator`` or
``shardcron.worker``; ``s3`` (and its client library) is imported only when an
``s3://`` store is opened.
"""

from shardcron.blobs.errors import (
    BlobDigestMismatch,
    BlobNotFound,
    BlobRangeNotSatisfiable,
    BlobStoreUnavailable,
    InvalidBlobKey,
)
from shardcron.blobs.s3_options import BlobStoreOptions
from shardcron.blobs.store import BlobEntry, BlobInfo, BlobReader, BlobStore, ByteRange, Written
from shardcron.blobs.urls import open_blob_store

__all__ = [
    "BlobDigestMismatch",
    "BlobEntry",
    "BlobInfo",
    "BlobNotFound",
    "BlobRangeNotSatisfiable",
    "BlobReader",
    "BlobStore",
    "BlobStoreOptions",
    "BlobStoreUnavailable",
    "ByteRange",
    "InvalidBlobKey",
    "Written",
    "open_blob_store",
]
