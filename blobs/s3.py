"""S3BlobStore: blobs as objects of one bucket, under a prefix, on any S3-compatible service.

The client is aiobotocore (pinned in pyproject.toml with the botocore it was released
against), chosen over the others a maintained project offers:
- it is asyncio on aiohttp, which the node already runs its HTTP edge on: no
  thread per request (boto3 is blocking; its managed transfers buffer parts in
  threads of their own) and no second HTTP stack in the process;
- botocore's S3 model exposes each call the seam needs as S3 defines it:
  ``If-None-Match`` on PutObject and CompleteMultipartUpload, ``Range`` on
  GetObject, ListObjectsV2 with ``StartAfter``, and multipart uploads driven part
  by part, so memory stays bounded by the part size;
- botocore resolves credentials (the standard environment, shared files, instance
  and container roles), signs (SigV4) and retries (its ``standard`` mode, for
  throttling, 5xx and dropped connections) as every AWS SDK does. obstore, the
  other asyncio choice, is pre-1.0 (its API still changes between minor releases)
  and hides multipart and conditional writes behind its own abstractions.

Checksums are sent only where S3 requires them (``when_required``): servers that
are not AWS still refuse botocore's newer default of a trailing checksum on every
upload. The blob's own sha256 is kept as user metadata (``x-amz-meta-sha256``).

``put`` sends one PutObject; ``put_stream`` sends one too when the bytes fit in one
part (``part_size``, default 8 MiB, at least S3's 5 MiB), else a multipart upload,
sending one part at a time (it holds about twice the part size: the chunks read,
then the part joined from them) and aborting the upload on any failure (an
upload a crash left behind is for the bucket's lifecycle rule
``AbortIncompleteMultipartUpload`` to remove). At most 10,000 parts: 78 GiB per blob
at the default part size.

``put_if_absent`` (and ``put_stream(if_absent=True)``) first asks HEAD, so bytes
already stored are not sent again, then writes with ``If-None-Match: *``: of racing
writers S3 keeps the first to complete and refuses the others (412). A service that
answers the condition with 501 Not Implemented is written to without it from then
on (logged once): HEAD-then-PUT, where two racers may both store, last one winning
whole. A retried conditional write whose first try was stored but whose reply was
lost is refused as already there: for content-addressed blobs, the bytes are the
same.

Ranges are sent as HTTP ranges; the cases S3 answers 416 or cannot express (an
empty range, a range starting at the end) are settled from a HEAD, so the seam's
range rules hold on every service.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from shardcron.blobs.errors import (
    BlobDigestMismatch,
    BlobNotFound,
    BlobStoreUnavailable,
    InvalidBlobKey,
)
from shardcron.blobs.keys import (
    check_folder,
    check_key,
    check_sha256,
    check_store_prefix,
    encode_page_token,
    is_key,
)
from shardcron.blobs.s3_options import BlobStoreOptions
from shardcron.blobs.store import (
    MAX_LIST_PAGE,
    READ_CHUNK,
    BlobEntry,
    BlobInfo,
    BlobReader,
    ByteRange,
    Written,
    check_listing,
    exists,
)
from shardcron.client.errors import InvalidArgument
from shardcron.client.limits import clip
from shardcron.client.types import Page

log = logging.getLogger("shardcron.blobs")

MAX_PARTS = 10_000  # S3's bound on one multipart upload
_MISSING = frozenset({"NoSuchKey", "NotFound", "404"})
# 412: a blob has the key; 409: another conditional write of it is completing.
_ALREADY_THERE = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})
_NO_CONDITIONS = frozenset({"NotImplemented", "501"})
# A service that keeps objects as files (Versity's POSIX backend) refuses a key under a
# blob, and a blob where others are kept under it.
_KEY_CLASHES = frozenset({"ObjectParentIsFile", "ExistingObjectIsDirectory"})
_TRANSPORT = (BotoCoreError, aiohttp.ClientError, TimeoutError, OSError)
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")

Send = Callable[[dict[str, str]], Awaitable[Any]]


class S3BlobStore:
    """Blobs in ``bucket`` under ``prefix`` (``a/b``: keys become ``a/b/<key>``)."""

    def __init__(
        self, bucket: str, prefix: str = "", options: BlobStoreOptions | None = None
    ) -> None:
        self.bucket = bucket
        self.prefix = check_store_prefix(prefix)
        self.options = options or BlobStoreOptions()
        self.part_size = self.options.part_size
        self.url = f"s3://{bucket}/{self.prefix}"
        self._client: Any = None
        self._stack: AsyncExitStack | None = None
        self._conditional_writes = True

    # --- lifecycle ----------------------------------------------------------

    async def open(self) -> None:
        if self._client is not None:
            return
        access_key, secret_key = self.options.credentials()
        stack = AsyncExitStack()
        client = await stack.enter_async_context(
            get_session().create_client(
                "s3",
                endpoint_url=self.options.endpoint,
                region_name=self.options.region,
                aws_access_key_id=access_key,
                aws_secret_access_key=secret_key,
                config=AioConfig(
                    s3={"addressing_style": "path" if self.options.endpoint else "auto"},
                    retries={"mode": "standard", "max_attempts": self.options.attempts},
                    connect_timeout=self.options.connect_timeout,
                    read_timeout=self.options.read_timeout,
                    request_checksum_calculation="when_required",
                    response_checksum_validation="when_required",
                ),
            )
        )
        try:
            await client.head_bucket(Bucket=self.bucket)
        except ClientError as e:
            await stack.aclose()
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            why = {404: "no such bucket", 403: "access denied: check the credentials"}
            raise BlobStoreUnavailable(
                f"{self._where()}: bucket {self.bucket!r}: {why.get(status, _describe(e))}"
            ) from e
        except _TRANSPORT as e:
            await stack.aclose()
            raise BlobStoreUnavailable(f"{self._where()}: {_describe(e)}") from e
        except BaseException:
            await stack.aclose()
            raise
        self._client, self._stack = client, stack

    async def close(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    # --- writes ---------------------------------------------------------------

    async def put(self, key: str, data: bytes) -> None:
        check_key(key)
        client = self._opened()
        with self._errors("write", key):
            await client.put_object(**self._object(key), Body=data, Metadata=_meta(data))

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        check_key(key)
        client = self._opened()
        if await exists(self, key):
            return False
        return await self._conditionally(
            key,
            lambda extra: client.put_object(
                **self._object(key), Body=data, Metadata=_meta(data), **extra
            ),
        )

    async def put_stream(
        self,
        key: str,
        chunks: AsyncIterable[bytes],
        *,
        sha256: str | None = None,
        if_absent: bool = False,
    ) -> Written | None:
        check_key(key)
        if sha256 is not None:
            check_sha256(sha256)
        client = self._opened()
        if if_absent and await exists(self, key):
            return None
        metadata = {"sha256": sha256} if sha256 is not None else {}
        digest, size, pending = hashlib.sha256(), 0, _Pending()
        upload: _Multipart | None = None
        try:
            async for chunk in chunks:
                digest.update(chunk)
                size += len(chunk)
                pending.add(chunk)
                while pending.size >= self.part_size:
                    if upload is None:
                        upload = await self._start_multipart(key, metadata)
                    await upload.send(pending.take(self.part_size))
            got = digest.hexdigest()
            if sha256 is not None and got != sha256:
                raise BlobDigestMismatch(sha256, got)
            send: Send
            if upload is None:
                body = pending.take(pending.size)

                def send(extra: dict[str, str]) -> Awaitable[Any]:
                    return client.put_object(
                        **self._object(key), Body=body, Metadata=metadata, **extra
                    )
            else:
                if pending.size:
                    await upload.send(pending.take(pending.size))
                send = upload.complete
            if if_absent:
                stored = await self._conditionally(key, send)
            else:
                with self._errors("write", key):
                    await send({})
                stored = True
            if upload is not None and stored:
                upload = None  # completed: nothing to abort
            return Written(size=size, sha256=got) if stored else None
        finally:
            if upload is not None:
                await asyncio.shield(upload.abort())

    async def _start_multipart(self, key: str, metadata: dict[str, str]) -> _Multipart:
        with self._errors("write", key):
            started = await self._client.create_multipart_upload(
                **self._object(key), Metadata=metadata
            )
        return _Multipart(self, key, started["UploadId"])

    async def _conditionally(self, key: str, send: Send) -> bool:
        """``send`` with ``If-None-Match: *``: False when a blob already has ``key``. A
        service that does not implement the condition is sent to without it."""
        with self._errors("write", key):
            try:
                await send({"IfNoneMatch": "*"} if self._conditional_writes else {})
            except ClientError as e:
                if _code(e) in _ALREADY_THERE:
                    return False
                if _code(e) not in _NO_CONDITIONS or not self._conditional_writes:
                    raise
                self._conditional_writes = False
                log.warning(
                    "%s: the service does not implement If-None-Match; put_if_absent is"
                    " HEAD-then-PUT from now on: racing writers may both store",
                    self._where(),
                )
                await send({})
        return True

    # --- reads --------------------------------------------------------------

    async def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        async with await self.get_stream(key, byte_range) as reader:
            return await reader.read()

    async def get_stream(self, key: str, byte_range: ByteRange | None = None) -> BlobReader:
        check_key(key)
        client = self._opened()
        byte_range = byte_range or ByteRange()
        if byte_range.empty:
            return _nothing(await self.head(key), byte_range)
        request = self._object(key)
        header = _http_range(byte_range)
        if header is not None:
            request["Range"] = header
        with self._errors("read", key):
            try:
                answer = await client.get_object(**request)
            except ClientError as e:
                if _code(e) != "InvalidRange":
                    raise
                return _nothing(await self.head(key), byte_range)  # starts at or past the end
        body = answer["Body"]
        span = _CONTENT_RANGE.fullmatch(answer.get("ContentRange") or "")
        if span:
            start, end, size = int(span[1]), int(span[2]) + 1, int(span[3])
        else:
            size = answer["ContentLength"]
            start, end = 0, size
            if header is not None and byte_range.resolve(size) != (0, size):
                body.close()
                raise BlobStoreUnavailable(f"{self._where()}: the service ignored a Range header")
        info = _info(key, size, answer)

        async def close() -> None:
            body.close()

        chunks = self._body_chunks(body, key)
        return BlobReader(info=info, start=start, end=end, chunks=chunks, close=close)

    async def _body_chunks(self, body: Any, key: str) -> AsyncIterator[bytes]:
        while True:
            with self._errors("read", key):
                data = await body.read(READ_CHUNK)
            if not data:
                return
            yield data

    async def head(self, key: str) -> BlobInfo:
        check_key(key)
        client = self._opened()
        with self._errors("head", key):
            answer = await client.head_object(**self._object(key))
        return _info(key, answer["ContentLength"], answer)

    async def list(
        self, prefix: str = "", *, page_size: int = MAX_LIST_PAGE, page_token: str = ""
    ) -> Page[BlobEntry]:
        after = check_listing(prefix, page_size, page_token)
        contents, truncated = await self._list_objects(prefix, page_size, after)
        skip = len(self.prefix)
        items = [
            BlobEntry(key=o["Key"][skip:], size=o["Size"], modified_at=_utc(o["LastModified"]))
            for o in contents
            if is_key(o["Key"][skip:])  # an object the seam did not write is not a blob
        ]
        token = encode_page_token(contents[-1]["Key"][skip:]) if truncated and contents else ""
        return Page(items=items, next_page_token=token)

    async def _list_objects(
        self, prefix: str, page_size: int, after: str
    ) -> tuple[list[dict[str, Any]], bool]:
        client = self._opened()
        request: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": self.prefix + prefix,
            "MaxKeys": page_size,
        }
        if after:
            request["StartAfter"] = self.prefix + after
        with self._errors("list", prefix):
            answer = await client.list_objects_v2(**request)
        return answer.get("Contents", []), bool(answer.get("IsTruncated"))

    # --- deletes ------------------------------------------------------------

    async def delete(self, key: str) -> None:
        check_key(key)
        client = self._opened()
        with contextlib.suppress(BlobNotFound), self._errors("delete", key):
            await client.delete_object(**self._object(key))

    async def delete_prefix(self, prefix: str) -> int:
        check_folder(prefix)
        client = self._opened()
        deleted, after = 0, ""
        while True:
            contents, truncated = await self._list_objects(prefix, MAX_LIST_PAGE, after)
            if contents:
                objects = [{"Key": o["Key"]} for o in contents]
                with self._errors("delete", prefix):
                    answer = await client.delete_objects(
                        Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True}
                    )
                if errors := answer.get("Errors"):
                    first = errors[0]
                    raise BlobStoreUnavailable(
                        f"{self._where()}: {len(errors)} of {len(objects)} objects under"
                        f" {clip(prefix, 200)!r} not deleted, as {first.get('Key')!r}:"
                        f" {first.get('Code')} {first.get('Message')}"
                    )
                deleted += len(objects)
                after = contents[-1]["Key"][len(self.prefix) :]
            if not truncated:
                return deleted

    # --- helpers --------------------------------------------------------------

    def _object(self, key: str) -> dict[str, Any]:
        return {"Bucket": self.bucket, "Key": self.prefix + key}

    def _opened(self) -> Any:
        if self._client is None:
            raise RuntimeError(f"{self.url}: the blob store is not open")
        return self._client

    def _where(self) -> str:
        return f"{self.url} at {self.options.endpoint or 'AWS'}"

    @contextlib.contextmanager
    def _errors(self, action: str, key: str) -> Iterator[None]:
        """S3's answers as the seam's errors: a missing object ``BlobNotFound``, any other
        failure ``BlobStoreUnavailable``."""
        try:
            yield
        except ClientError as e:
            if _code(e) in _MISSING:
                raise BlobNotFound(key) from None
            if _code(e) in _KEY_CLASHES:
                raise InvalidBlobKey(
                    "key", f"{clip(key)!r}: a blob and a folder of blobs would share a name"
                ) from None
            raise BlobStoreUnavailable(
                f"{self._where()}: cannot {action} {clip(key, 200)!r}: {_describe(e)}"
            ) from e
        except _TRANSPORT as e:
            raise BlobStoreUnavailable(
                f"{self._where()}: cannot {action} {clip(key, 200)!r}: {_describe(e)}"
            ) from e


class _Pending:
    """The chunks read and not sent yet, taken a part at a time: a part is joined from
    them once (a chunk across its end is split), and they are let go as it is."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0

    def add(self, chunk: bytes) -> None:
        if chunk:
            self.chunks.append(chunk)
            self.size += len(chunk)

    def take(self, size: int) -> bytes:
        """The first ``size`` bytes (at most ``self.size``), removed."""
        taken: list[bytes | memoryview] = []
        need = size
        while need and self.chunks:
            chunk = self.chunks[0]
            if len(chunk) <= need:
                taken.append(self.chunks.pop(0))
                need -= len(chunk)
            else:
                view = memoryview(chunk)
                taken.append(view[:need])
                self.chunks[0] = bytes(view[need:])
                need = 0
        part = b"".join(taken)
        self.size -= len(part)
        return part


class _Multipart:
    """One multipart upload, its parts sent one at a time."""

    def __init__(self, store: S3BlobStore, key: str, upload_id: str) -> None:
        self.store = store
        self.key = key
        self.upload_id = upload_id
        self.parts: list[dict[str, Any]] = []

    async def send(self, data: bytes) -> None:
        number = len(self.parts) + 1
        if number > MAX_PARTS:
            raise InvalidArgument(
                "chunks",
                f"more than {MAX_PARTS} parts of {self.store.part_size} bytes: a larger part_size"
                " is needed",
            )
        with self.store._errors("write", self.key):
            sent = await self.store._client.upload_part(
                **self.store._object(self.key),
                UploadId=self.upload_id,
                PartNumber=number,
                Body=data,
            )
        self.parts.append({"PartNumber": number, "ETag": sent["ETag"]})

    def complete(self, extra: dict[str, str]) -> Awaitable[Any]:
        return self.store._client.complete_multipart_upload(
            **self.store._object(self.key),
            UploadId=self.upload_id,
            MultipartUpload={"Parts": self.parts},
            **extra,
        )

    async def abort(self) -> None:
        try:
            await self.store._client.abort_multipart_upload(
                **self.store._object(self.key), UploadId=self.upload_id
            )
        except (ClientError, *_TRANSPORT) as e:
            log.warning(
                "%s: could not abort the upload of %r: %s", self.store.url, self.key, _describe(e)
            )


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _meta(data: bytes) -> dict[str, str]:
    return {"sha256": hashlib.sha256(data).hexdigest()}


def _utc(when: datetime) -> datetime:
    return when.astimezone(UTC)


def _info(key: str, size: int, answer: dict[str, Any]) -> BlobInfo:
    digest = (answer.get("Metadata") or {}).get("sha256")
    try:
        digest = check_sha256(digest) if digest is not None else None
    except InvalidArgument:
        digest = None  # not written by the seam
    return BlobInfo(key=key, size=size, modified_at=_utc(answer["LastModified"]), sha256=digest)


def _http_range(byte_range: ByteRange) -> str | None:
    """The Range header of a non-empty range; None for the whole blob."""
    if byte_range.suffix is not None:
        return f"bytes=-{byte_range.suffix}"
    if byte_range.end is None:
        return None if byte_range.start == 0 else f"bytes={byte_range.start}-"
    return f"bytes={byte_range.start}-{byte_range.end - 1}"


def _nothing(info: BlobInfo, byte_range: ByteRange) -> BlobReader:
    """A read of no bytes (raises when the range starts past the end)."""
    start, end = byte_range.resolve(info.size)

    async def chunks() -> AsyncIterator[bytes]:
        return
        yield

    async def close() -> None:
        pass

    return BlobReader(info=info, start=start, end=start, chunks=chunks(), close=close)
