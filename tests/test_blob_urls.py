"""A blob store from its URL and options: the store each URL names, and each mistake refused
with a ``ValueError`` that names the field (``shardcron.blobs.urls``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardcron.blobs.files import FileBlobStore
from shardcron.blobs.s3 import S3BlobStore
from shardcron.blobs.s3_options import (
    ENV_ACCESS_KEY_FILE,
    ENV_ENDPOINT,
    ENV_REGION,
    ENV_SECRET_KEY_FILE,
    BlobStoreOptions,
)
from shardcron.blobs.urls import blob_store_for


def test_a_file_url_names_a_directory() -> None:
    store = blob_store_for("file:///var/lib/shardcron/blobs")
    assert isinstance(store, FileBlobStore)
    assert store.root == Path("/var/lib/shardcron/blobs")
    assert store.url == "file:///var/lib/shardcron/blobs"
    assert blob_store_for("file://localhost/srv/b").root == Path("/srv/b")
    assert blob_store_for("file:///srv/with%20space").root == Path("/srv/with space")


def test_an_s3_url_names_a_bucket_and_a_prefix() -> None:
    options = BlobStoreOptions(endpoint="http://127.0.0.1:7070", region="eu-west-1")
    store = blob_store_for("s3://my-bucket/team/blobs/", options)
    assert isinstance(store, S3BlobStore)
    assert (store.bucket, store.prefix, store.url) == (
        "my-bucket",
        "team/blobs/",
        "s3://my-bucket/team/blobs/",
    )
    assert store.options is options
    assert blob_store_for("s3://my.bucket").prefix == ""


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("file://relative/path", "host"),
        ("file:relative", "path"),
        ("file:///", "path"),
        ("file:///srv/b?x=1", "query"),
        ("s3://AKIA:secret@bucket/p", "credentials"),
        ("s3://bucket:9000/p", "credentials"),
        ("s3://b/p", "bucket"),
        ("s3://Bucket/p", "bucket"),
        ("s3://a..b/p", "bucket"),
        ("s3:///p", "bucket"),
        ("s3://bucket/a//b", "prefix"),
        ("s3://bucket/../x", "prefix"),
        ("s3://bucket/p?access_key=x", "query"),
        ("gs://bucket/p", "scheme"),
        ("/var/lib/blobs", "scheme"),
    ],
)
def test_a_url_that_cannot_work_is_refused_naming_its_field(url: str, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        blob_store_for(url)


def test_a_file_store_takes_no_s3_option() -> None:
    with pytest.raises(ValueError, match="^endpoint, region: only an s3:// store"):
        blob_store_for("file:///srv/b", BlobStoreOptions(endpoint="http://h:1", region="x-1"))


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"endpoint": "127.0.0.1:7070"}, "endpoint"),
        ({"endpoint": "ftp://h"}, "endpoint"),
        ({"endpoint": "http://key:secret@h"}, "endpoint"),
        ({"endpoint": "http://h/path"}, "endpoint"),
        ({"region": "Not A Region"}, "region"),
        ({"access_key_file": Path("/k")}, "access_key_file, secret_key_file"),
        ({"part_size": 1 << 20}, "part_size"),
        ({"attempts": 0}, "attempts"),
        ({"read_timeout": 0}, "read_timeout"),
    ],
)
def test_options_that_cannot_work_are_refused_naming_the_field(options, field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}: "):
        BlobStoreOptions(**options)


def test_options_come_from_flags_over_the_environment(tmp_path: Path) -> None:
    env = {
        ENV_ENDPOINT: "http://from-env:1",
        ENV_REGION: "eu-west-1",
        ENV_ACCESS_KEY_FILE: str(tmp_path / "a"),
        ENV_SECRET_KEY_FILE: str(tmp_path / "s"),
    }
    options = BlobStoreOptions.from_env(env, endpoint="http://from-flag:2", region=None)
    assert options == BlobStoreOptions(
        endpoint="http://from-flag:2",
        region="eu-west-1",
        access_key_file=tmp_path / "a",
        secret_key_file=tmp_path / "s",
    )
    assert BlobStoreOptions.from_env({}) == BlobStoreOptions()


def test_credentials_are_read_from_their_files(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("AKIDEXAMPLE\n")
    (tmp_path / "s").write_text("  wJalrXUtnFEMI/K7MDENG  \n")
    options = BlobStoreOptions(access_key_file=tmp_path / "a", secret_key_file=tmp_path / "s")
    assert options.credentials() == ("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG")
    assert BlobStoreOptions().credentials() == (None, None)
    (tmp_path / "s").write_text("two words\n")
    with pytest.raises(ValueError, match="^secret_key_file: .* one key on one line"):
        options.credentials()
    (tmp_path / "s").unlink()
    with pytest.raises(ValueError, match="^secret_key_file: cannot read"):
        options.credentials()
