"""What the contract suite cannot see of ``S3BlobStore``, on the session's real S3 service
(the Versity S3 gateway): opening against a wrong bucket, credentials or endpoint, the
credential chain of the environment, and objects in its prefix it did not write."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiobotocore.session import get_session

from deploy import VersityGateway
from deploy.versitygw import free_port
from shardcron.blobs.errors import BlobStoreUnavailable
from shardcron.blobs.s3 import S3BlobStore
from shardcron.blobs.urls import blob_store_for
from tests.support.blob_stores import BUCKET, gateway_options


@pytest.fixture
async def raw_client(s3_gateway: VersityGateway) -> AsyncIterator:
    """A plain S3 client of the gateway, to put objects the seam would not."""
    async with get_session().create_client(
        "s3",
        endpoint_url=s3_gateway.endpoint,
        region_name="us-east-1",
        aws_access_key_id=s3_gateway.access_key_file.read_text().strip(),
        aws_secret_access_key=s3_gateway.secret_key_file.read_text().strip(),
    ) as client:
        yield client


async def test_a_missing_bucket_is_said_at_open(s3_gateway: VersityGateway) -> None:
    store = S3BlobStore("no-such-bucket", "", gateway_options(s3_gateway))
    with pytest.raises(BlobStoreUnavailable, match="'no-such-bucket': no such bucket"):
        await store.open()


async def test_wrong_credentials_are_said_at_open(
    s3_gateway: VersityGateway, tmp_path: Path
) -> None:
    (tmp_path / "a").write_text(s3_gateway.access_key_file.read_text())
    (tmp_path / "s").write_text("not-the-secret\n")
    options = gateway_options(
        s3_gateway, access_key_file=tmp_path / "a", secret_key_file=tmp_path / "s"
    )
    with pytest.raises(BlobStoreUnavailable, match="access denied"):
        await S3BlobStore(BUCKET, "", options).open()


async def test_an_endpoint_nobody_serves_is_unavailable(s3_gateway: VersityGateway) -> None:
    options = gateway_options(
        s3_gateway, endpoint=f"http://127.0.0.1:{free_port()}", attempts=1, connect_timeout=1
    )
    with pytest.raises(BlobStoreUnavailable, match="127.0.0.1") as refused:
        await S3BlobStore(BUCKET, "", options).open()
    assert refused.value.__cause__ is not None


async def test_credentials_from_the_aws_environment(
    s3_gateway: VersityGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_gateway.access_key_file.read_text().strip())
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_gateway.secret_key_file.read_text().strip())
    options = gateway_options(s3_gateway, access_key_file=None, secret_key_file=None)
    store = blob_store_for(f"s3://{BUCKET}/t-{uuid.uuid4().hex[:8]}", options)
    await store.open()
    try:
        await store.put("k/a", b"via the environment")
        assert await store.get("k/a") == b"via the environment"
    finally:
        await store.close()


async def test_objects_it_did_not_write_are_not_blobs(
    s3_gateway: VersityGateway, raw_client
) -> None:
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    for name in ("k/a b", "k/.hidden", "k/z"):
        await raw_client.put_object(Bucket=BUCKET, Key=f"{prefix}/{name}", Body=b"raw")
    await raw_client.put_object(
        Bucket=BUCKET, Key=f"{prefix}/k/m", Body=b"raw", Metadata={"sha256": "not-hex"}
    )
    store = S3BlobStore(BUCKET, prefix, gateway_options(s3_gateway))
    await store.open()
    try:
        first = await store.list("k/", page_size=2)
        assert first.items == []  # "k/.hidden", "k/a b": no blob, and the page goes on
        assert first.next_page_token
        rest = await store.list("k/", page_token=first.next_page_token)
        assert [e.key for e in rest.items] == ["k/m", "k/z"]
        assert (await store.head("k/m")).sha256 is None
        assert await store.delete_prefix("k/") == 4  # everything under the folder
    finally:
        await store.close()
