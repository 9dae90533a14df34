"""The HTTP port with the node's TLS: served over TLS with the node's certificate,
requiring a client certificate when the node requires one (a bearer token alone does
not get in, as over gRPC), the verified certificate's subject naming its principal;
and the loopback rule, as for ``--listen``: no plaintext HTTP beyond loopback without
``insecure``.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from shardcron.client.errors import InvalidArgument
from shardcron.client.tls import server_tls
from shardcron.coordinator.auth import AuthSource
from shardcron.coordinator.coordination import LocalCoordination
from shardcron.coordinator.node import Node, NodeConfig
from shardcron.coordinator.sqlite.store import SqliteStore
from tests.support.auth import TOKENS, auth_file_text
from tests.support.certs import CertFiles, Pki

SHARDS = 4
JOB = {
    "spec": {
        "name": "t",
        "task": {"handler": {"name": "noop"}},
        "schedule": {"kind": "SCHEDULE_KIND_AT", "at": "2099-01-01T00:00:00Z"},
    }
}


def node_on(tmp_path: Path, pki: Pki, http_listen: str, **config: Any) -> Node:
    auth_file = tmp_path / "auth.toml"
    auth_file.write_text(
        auth_file_text(["writer"]) + '\n[[principal]]\nname = "carol"\ncert_subject = "CN=carol"\n'
        'role = "writer"\nowners = ["team-c"]\n'
    )
    return Node(
        SqliteStore(tmp_path / "db", shard_count=SHARDS),
        LocalCoordination(tmp_path, shard_count=SHARDS, node_id="n"),
        NodeConfig(listen="127.0.0.1:0", node_id="n", http_listen=http_listen, **config),
        auth=AuthSource(auth_file),
    )


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path / "pki")


@pytest.fixture
async def mtls_node(tmp_path: Path, pki: Pki) -> AsyncIterator[Node]:
    tls = server_tls(pki.node.cert, pki.node.key, client_ca=pki.ca, ca=pki.ca)
    node = node_on(tmp_path, pki, "127.0.0.1:0", tls=tls)
    await node.start()
    try:
        yield node
    finally:
        await node.stop(0)


def context(pki: Pki, cert: CertFiles | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    return ctx


async def call(
    url: str, method: str, path: str, ssl_context: ssl.SSLContext | None, **kw: Any
) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url + path, ssl=ssl_context or False, **kw) as reply,
    ):
        return reply.status, await reply.json()


async def test_http_is_served_over_tls_and_asks_for_client_certificates(
    mtls_node: Node, pki: Pki
) -> None:
    url = f"https://127.0.0.1:{mtls_node.http_port}"
    carol = context(pki, pki.client("carol"))
    # the verified certificate's subject names the principal: carol, of team-c
    status, created = await call(url, "POST", "/v1/jobs", carol, json=JOB)
    assert (status, created["job"]["owner"]) == (202, "team-c")
    status, listed = await call(url, "GET", "/v1/jobs", carol)
    assert [j["id"] for j in listed["jobs"]] == [created["job"]["id"]]
    # a token with a certificate is judged by the token, as over gRPC
    writer = {"authorization": f"Bearer {TOKENS['writer']}"}
    status, created = await call(url, "POST", "/v1/jobs", carol, json=JOB, headers=writer)
    assert (status, created["job"]["owner"]) == (202, "a")
    # no certificate: not even with a token; an untrusted one; plaintext: nothing answers
    refused: list[tuple[ssl.SSLContext | None, str]] = [
        (context(pki, None), url),
        (context(pki, pki.untrusted_client("mallory")), url),
        (None, url.replace("https", "http")),
    ]
    for ssl_context, base in refused:
        with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
            await call(base, "GET", "/v1/jobs", ssl_context, headers=writer)


async def test_plaintext_http_beyond_loopback_needs_insecure(tmp_path: Path, pki: Pki) -> None:
    with pytest.raises(InvalidArgument) as refused:
        node_on(tmp_path, pki, "0.0.0.0:0")
    assert refused.value.field == "http_listen"
    node_on(tmp_path, pki, "0.0.0.0:0", insecure=True)  # on purpose
    tls = server_tls(pki.node.cert, pki.node.key)
    node = node_on(tmp_path, pki, "0.0.0.0:0", tls=tls)  # with TLS
    await node.start()
    try:
        status, _ = await call(
            f"https://127.0.0.1:{node.http_port}",
            "GET",
            "/v1/jobs",
            context(pki, None),
            headers={"authorization": f"Bearer {TOKENS['writer']}"},
        )
        assert status == 200
    finally:
        await node.stop(0)
