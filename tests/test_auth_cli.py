"""The CLI's ``--token``: a root option like ``--target`` and ``--owner``, accepted
before or after the subcommand (the later one wins), and from ``SHARDCRON_TOKEN``; the
TLS flags after the subcommand too."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from shardcron.client.cli import cli
from tests.support.cli import FakeClient


@pytest.mark.parametrize(
    ("args", "env", "sent"),
    [
        (["--token", "t1", "job", "get", "job-1"], {}, "t1"),
        (["job", "get", "job-1", "--token", "t2"], {}, "t2"),
        (["--token", "t1", "job", "get", "job-1", "--token", "t2"], {}, "t2"),
        (["job", "get", "job-1"], {"SHARDCRON_TOKEN": "t3"}, "t3"),
        (["job", "get", "job-1", "--token", "t2"], {"SHARDCRON_TOKEN": "t3"}, "t2"),
    ],
)
def test_token_before_or_after_the_subcommand(args: list[str], env: dict, sent: str) -> None:
    fake = FakeClient()
    result = CliRunner().invoke(cli, args, obj=fake, env=env)
    assert result.exit_code == 0, result.output
    assert fake.connected["token"] == sent


def test_no_token_sends_none_and_no_owner_lets_the_node_choose() -> None:
    fake = FakeClient()
    result = CliRunner().invoke(cli, ["job", "get", "job-1"], obj=fake, env={})
    assert result.exit_code == 0, result.output
    assert "token" not in fake.connected and fake.connected["owner"] is None


def test_tls_flags_after_the_subcommand_replace_the_root_ones(tmp_path) -> None:  # type: ignore[no-untyped-def]
    files = {}
    for name in ("ca", "ca2", "cert", "key"):
        files[name] = tmp_path / f"{name}.pem"
        files[name].write_text("pem")
    fake = FakeClient()
    args = ["--tls-ca", str(files["ca"]), "job", "get", "job-1", "--tls-ca", str(files["ca2"])]
    args += ["--tls-cert", str(files["cert"]), "--tls-key", str(files["key"])]
    result = CliRunner().invoke(cli, args, obj=fake, env={})
    assert result.exit_code == 0, result.output
    sent = {k: str(v) for k, v in fake.connected.items() if k.startswith("tls_")}
    assert sent == {
        "tls_ca": str(files["ca2"]),
        "tls_cert": str(files["cert"]),
        "tls_key": str(files["key"]),
    }
