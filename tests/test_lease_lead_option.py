"""``--lease-lead`` of ``shardcron dev`` and ``shardcron node``: a duration up to 10 s,
500 ms on the embedded store and 1 s on a cluster node, whose turns wait on Cassandra
(a 2,000-job minute mark started its fires 0.25 s late with 500 ms)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from shardcron.main import cli


@pytest.mark.parametrize(("command", "default"), [("dev", "500ms"), ("node", "1s")])
def test_each_role_command_says_its_lead(command: str, default: str) -> None:
    result = CliRunner().invoke(cli, [command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if "--lease-lead" in line)
    assert line.split()[1] == "TEXT"
    assert f"[default: {default}]" in " ".join(result.output.split())


@pytest.mark.parametrize(
    ("value", "reason"),
    [("11s", "at most 10s"), ("soon", "--lease-lead"), ("-1s", "--lease-lead")],
)
@pytest.mark.parametrize("command", ["dev", "node"])
def test_a_lead_out_of_bounds_is_refused_before_anything_starts(
    command: str, value: str, reason: str, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    args = [command, "--lease-lead", value]
    if command == "dev":
        args += ["--data-dir", str(tmp_path)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert reason in result.output
    assert not any(tmp_path.iterdir())  # nothing started, nothing written
