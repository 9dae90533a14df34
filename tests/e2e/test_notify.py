"""Webhook notifications end to end: a real ``shardcron dev`` posts to a real HTTP
receiver the test starts (docs/notifications.md).

- each rule (failure, dead letter, consecutive failures, recovery, late, missed) is
  notified with a signature the owner's secret verifies;
- a receiver answering 500 then 200 gets the delivery again, and it is then DELIVERED
  after two attempts, listed so by ``notify list``;
- a node SIGKILLed after a delivery was committed (its first attempt reached the
  receiver, which never answered) still delivers it after its restart;
- a webhook on a loopback or link-local address is refused at create by a node that
  does not allow private webhooks;
- an owner's default rules notify its jobs without rules of their own, signed with the
  secret it set through the API (sealed at rest, never shown back).
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from shardcron.client.errors import InvalidArgument, Unavailable
from shardcron.client.types import (
    CommandTask,
    ConcurrencyPolicy,
    Delivery,
    DeliveryStatus,
    JobSpec,
    NotifyPolicy,
    NotifySettings,
    OverlapPolicy,
    RetryPolicy,
    Schedule,
)
from shardcron.coordinator.notify.signing import verify
from tests.e2e.harness import DevServer
from tests.e2e.test_secrets_env import write_keys
from tests.support.waiting import wait_until
from tests.support.webhooks import Receiver

pytestmark = pytest.mark.e2e

OWNER = "notify-owner"
SECRET = "s3cret-of-notify-owner"
S = timedelta(seconds=1)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """A dev node that may call the test's receiver on 127.0.0.1, with a signing secret."""
    base = tmp_path_factory.mktemp("notify")
    secrets = base / "secrets.toml"
    secrets.write_text(f'[secrets]\n"{OWNER}" = "{SECRET}"\n')
    server = DevServer(
        base / "data",
        extra=[
            "--workers", "1", "--slots", "8", "--lease-ttl", "3s",
            "--notify-allow-private", "--notify-secrets", str(secrets),
        ],
    ).start()  # fmt: skip
    yield server
    server.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


def _signed(r) -> bool:  # type: ignore[no-untyped-def]
    h = r.headers
    return verify(SECRET.encode(), h["x-shardcron-timestamp"], r.body, h["x-shardcron-signature"])


def _spec(name: str, argv: tuple[str, ...], **fields: object) -> JobSpec:
    return JobSpec(name=name, task=CommandTask(argv=argv), **fields)  # type: ignore[arg-type]


def test_each_rule_notifies_with_a_valid_signature(node: DevServer, receiver: Receiver) -> None:
    client = node.client(OWNER)
    every = Schedule.every(S)
    failing = client.create_job(
        _spec(
            "failing", ("false",), schedule=every, retry=RetryPolicy(max_attempts=1),
            notify=NotifyPolicy(
                webhook_url=f"{receiver.url}/failing", on_failure=True, on_dead_letter=True,
                on_consecutive_failures=2, on_recovery=True,
            ),
        )
    )  # fmt: skip
    late = client.create_job(
        _spec(
            "late", ("sleep", "1.5"), schedule=every,
            concurrency=ConcurrencyPolicy(max_concurrent=1, overlap=OverlapPolicy.QUEUE),
            notify=NotifyPolicy(webhook_url=f"{receiver.url}/late", on_late=S / 4),
        )
    )  # fmt: skip
    missed = client.create_job(
        _spec(
            "missed", ("sleep", "2.5"), schedule=every,
            concurrency=ConcurrencyPolicy(max_concurrent=1, overlap=OverlapPolicy.FORBID),
            notify=NotifyPolicy(webhook_url=f"{receiver.url}/missed", on_missed=True),
        )
    )  # fmt: skip

    def rules(path: str) -> set[str]:
        return {r.record["rule"] for r in receiver.of(path)}

    wait_until(
        lambda: {"failure", "dead_letter", "consecutive_failures"} <= rules("/failing"),
        timeout=30, what="the failing job's notifications",
    )  # fmt: skip
    current = client.get_job(failing.id)
    client.update_job(
        failing.id,
        current.spec.replace(task=CommandTask(argv=("true",))),
        expected_version=current.version,
    )
    wait_until(lambda: "recovery" in rules("/failing"), timeout=30, what="a recovery")
    wait_until(lambda: "late" in rules("/late"), timeout=30, what="a late start")
    wait_until(lambda: "missed" in rules("/missed"), timeout=30, what="a skipped fire")
    for job in (failing, late, missed):
        client.delete_job(job.id, cancel_running=True)

    got = list(receiver.received)
    assert got and all(_signed(r) for r in got)
    for r in got:
        record = r.record
        assert r.headers["x-shardcron-delivery"] == record["delivery_id"]
        assert record["job"]["owner"] == OWNER
        assert record["delivery_id"] == f"{record['run']['id']}.{record['rule']}"
    by_rule = {r.record["rule"]: r.record for r in got}
    assert by_rule["failure"]["run"]["state"] == "FAILED"
    assert by_rule["dead_letter"]["run"]["dead_letter"] is True
    assert by_rule["recovery"]["run"]["state"] == "SUCCEEDED"
    assert by_rule["missed"]["run"]["reason"] == "OVERLAP"
    assert "after it was due" in by_rule["late"]["reason"]
    tampered = got[0]
    assert not verify(
        SECRET.encode(), tampered.headers["x-shardcron-timestamp"], tampered.body + b" ",
        tampered.headers["x-shardcron-signature"],
    )  # fmt: skip


def test_a_500_then_200_is_delivered_once_after_a_retry(node: DevServer) -> None:
    receiver = Receiver(statuses=(500, 200)).start()
    try:
        client = node.client(OWNER)
        job = client.create_job(
            _spec(
                "flaky-receiver", ("false",), retry=RetryPolicy(max_attempts=1),
                notify=NotifyPolicy(webhook_url=f"{receiver.url}/x", on_failure=True),
            )
        )  # fmt: skip
        wait_until(
            lambda: any(r.status == 200 for r in receiver.received), timeout=30,
            what="the retried delivery",
        )  # fmt: skip
        [d] = wait_until(
            lambda: [
                d for d in client.list_deliveries(job_id=job.id).items
                if d.status == DeliveryStatus.DELIVERED
            ],
            timeout=10, what="the delivery recorded DELIVERED",
        )  # fmt: skip
        assert [r.status for r in receiver.received] == [500, 200]
        assert {r.headers["x-shardcron-delivery"] for r in receiver.received} == {d.id}
        assert d.attempts == 2 and d.delivered_at is not None
        listed = node.cli("--json", "notify", "list", job.id, owner=OWNER)
        [shown] = json.loads(listed.stdout)
        assert shown["status"] == "DELIVERED" and shown["attempts"] == 2
        assert 'shardcron_notify_deliveries_total{outcome="failed"}' in node.metrics()
        url = f"{node.http_url}/v1/deliveries?jobId={job.id}"
        request = urllib.request.Request(url, headers={"x-shardcron-owner": OWNER})
        with urllib.request.urlopen(request, timeout=10) as reply:
            [over_http] = json.load(reply)["deliveries"]
        assert over_http["id"] == d.id and over_http["attempts"] == 2
        assert over_http["status"] == "DELIVERY_STATUS_DELIVERED"
    finally:
        receiver.stop()


def test_a_node_killed_after_the_commit_delivers_after_its_restart(tmp_path: Path) -> None:
    receiver = Receiver().start()
    receiver.hold.set()  # the first attempt gets no answer: the node dies in it
    server = DevServer(
        tmp_path / "data", extra=["--workers", "1", "--notify-allow-private"]
    ).start()
    try:
        client = server.client(OWNER)
        job = client.create_job(
            _spec(
                "killed", ("false",), retry=RetryPolicy(max_attempts=1),
                notify=NotifyPolicy(webhook_url=f"{receiver.url}/k", on_failure=True),
            )
        )  # fmt: skip
        wait_until(lambda: receiver.received, timeout=30, what="the first attempt")
        server.kill()
        receiver.hold.clear()
        server.start()
        wait_until(
            lambda: any(r.status == 200 for r in receiver.received), timeout=30,
            what="the delivery after the restart",
        )  # fmt: skip
        ids = {r.headers["x-shardcron-delivery"] for r in receiver.received}
        listed: list[Delivery] = []

        def listing() -> bool:
            # gRPC shares subchannels between channels to one address: a new client's
            # first call may still meet the killed node's connection backing off
            try:
                listed[:] = server.client(OWNER).list_deliveries(job_id=job.id).items
            except Unavailable:
                return False
            return True

        wait_until(listing, timeout=30, what="the deliveries listed after the restart")
        [d] = listed
        assert ids == {d.id} and d.run_id in d.id
        wait_until(
            lambda: server.client(OWNER).list_deliveries(job_id=job.id).items[0].status
            == DeliveryStatus.DELIVERED,
            timeout=10, what="the delivery recorded DELIVERED",
        )  # fmt: skip
    finally:
        server.stop()
        receiver.stop()


def test_a_private_webhook_is_refused_unless_the_node_allows_it(tmp_path: Path) -> None:
    server = DevServer(tmp_path / "data", extra=["--workers", "0"]).start()
    try:
        client = server.client(OWNER)
        for url in ("http://127.0.0.1:9/x", "http://localhost/x", "http://169.254.169.254/x",
                    "http://[::1]/x", "http://10.0.0.1/x"):  # fmt: skip
            policy = NotifyPolicy(webhook_url=url, on_failure=True)
            with pytest.raises(InvalidArgument) as refused:
                client.create_job(_spec("private", ("true",), notify=policy))
            assert "spec.notify.webhook_url" in str(refused.value)
            assert "refused" in str(refused.value)
        out = server.cli(
            "job", "create", "p", "--notify-webhook", "http://127.0.0.1:9/x",
            "--notify-on", "failure", "--", "true", owner=OWNER, check=False,
        )  # fmt: skip
        assert out.returncode != 0 and "not a public address" in out.stderr
        assert client.list_jobs().items == []
    finally:
        server.stop()


def test_owner_defaults_and_a_secret_set_through_the_api_sign_its_jobs_deliveries(
    tmp_path: Path,
) -> None:
    """Default rules (``notify defaults``) notify a job with no rules of its own; the
    secret set with ``notify set-secret`` (stdin) signs them, is never shown back, and
    is sealed at rest with the node's key file."""
    owner, secret = "notify-defaults", f"api-secret-{uuid.uuid4().hex}"
    receiver = Receiver().start()
    keys = write_keys(tmp_path / "keys", "k1")
    server = DevServer(
        tmp_path / "data",
        extra=["--workers", "1", "--notify-allow-private", "--secrets-key-file", str(keys)],
    ).start()
    try:
        server.cli("notify", "set-secret", owner=owner, input=secret + "\n")
        shown = server.cli(
            "--json", "notify", "defaults", "--webhook", f"{receiver.url}/d",
            "--on", "failure,dead-letter", owner=owner,
        )  # fmt: skip
        assert json.loads(shown.stdout)["secret_set"] is True
        assert secret not in shown.stdout
        stored = b"".join(f.read_bytes() for f in (tmp_path / "data").glob("shardcron.db*"))
        assert secret.encode() not in stored and b"sealed:v1:k1:" in stored
        client = server.client(owner)
        job = client.create_job(
            _spec("plain", ("false",), retry=RetryPolicy(max_attempts=1))
        )  # no rules of its own
        wait_until(lambda: len(receiver.received) >= 2, timeout=30, what="two deliveries")
        got = receiver.received
        assert {r.record["rule"] for r in got} == {"failure", "dead_letter"}
        assert {r.record["job"]["id"] for r in got} == {job.id}
        for r in got:
            h = r.headers
            assert verify(
                secret.encode(), h["x-shardcron-timestamp"], r.body, h["x-shardcron-signature"]
            )
        cleared = client.set_notify_defaults(None)
        assert cleared.defaults is None and cleared.secret_set
        with pytest.raises(InvalidArgument):
            client.set_notify_secret("short")
        with pytest.raises(InvalidArgument):
            client.set_notify_defaults(NotifyPolicy(webhook_url="ftp://x/y", on_failure=True))
    finally:
        server.stop()
        receiver.stop()


def test_another_owner_sees_none_of_its_deliveries_settings_or_overview(node: DevServer) -> None:
    """Another owner naming this owner's job gets no delivery, over gRPC and HTTP; its
    settings and overview hold nothing of this owner's."""
    receiver = Receiver().start()
    try:
        client = node.client(OWNER)
        job = client.create_job(
            _spec(
                "watched", ("false",), retry=RetryPolicy(max_attempts=1),
                notify=NotifyPolicy(webhook_url=f"{receiver.url}/w", on_failure=True),
            )
        )  # fmt: skip
        wait_until(
            lambda: client.list_deliveries(job_id=job.id).items, timeout=30,
            what="the owner's delivery",
        )  # fmt: skip
        wait_until(
            lambda: job.id in _http(node, "/v1/overview", OWNER), timeout=30,
            what="the job failing in its owner's overview",
        )  # fmt: skip
        other = node.client(f"other-{uuid.uuid4().hex[:8]}")
        assert other.list_deliveries(job_id=job.id).items == []
        assert other.list_deliveries().items == []
        assert other.notify_settings() == NotifySettings()
        for path in (f"/v1/deliveries?jobId={job.id}", "/v1/deliveries", "/v1/overview",
                     "/v1/notifySettings"):  # fmt: skip
            body = _http(node, path, other.owner)
            assert job.id not in body and receiver.url not in body, (path, body)
        client.delete_job(job.id, cancel_running=True)
    finally:
        receiver.stop()


def _http(node: DevServer, path: str, owner: str) -> str:
    request = urllib.request.Request(f"{node.http_url}{path}", headers={"x-shardcron-owner": owner})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return reply.read().decode()
