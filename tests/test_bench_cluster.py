"""The cluster bench system's parts that need no cluster: which job ids ``run_times``
reads the runs of (``named_ids``, over the owner's ids newest first), and the node
command ``deploy.cluster.start_node`` starts again after a crash."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.systems.shardcron_cluster import named_ids
from deploy import cluster


def _pages(read: list[int], *pages: list[tuple[str, str | None]]) -> Iterator[list]:
    for number, page in enumerate(pages):
        read.append(number)
        yield page


def test_named_ids_skip_newer_jobs_and_stop_after_the_named_span() -> None:
    read: list[int] = []
    pages = _pages(
        read,
        [("j9", "later"), ("j8", "later")],  # made after the named jobs
        [("j7", "later"), ("j6", "s1-cron")],
        [("j5", "s1-cron"), ("j4", None)],  # a job gone from `jobs`: no name
        [("j3", "s1"), ("j2", "s1")],  # none named: the span has been passed
        [("j1", "s1-cron")],  # never read
    )
    assert named_ids(pages, "s1-cron") == ["j6", "j5"]
    assert read == [0, 1, 2, 3]


def test_named_ids_read_every_page_when_the_name_runs_to_the_oldest() -> None:
    read: list[int] = []
    pages = _pages(read, [("j3", "x")], [("j2", "w4")], [("j1", "w4")])
    assert named_ids(pages, "w4") == ["j2", "j1"]
    assert read == [0, 1, 2]
    assert named_ids(iter([[("j1", "x")]]), "w4") == []


def test_start_node_repeats_the_command_up_gave_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "endpoints.json").write_text(
        json.dumps({"zookeeper": "127.0.0.1:2191", "cassandra": "127.0.0.11"})
    )
    (tmp_path / "tokens.json").write_text(json.dumps({"node": "node-token"}))
    spawned: list[tuple[str, list[str], dict[str, str] | None]] = []

    def spawn(name: str, cmd: list[str], state: Path, env: dict[str, str] | None = None) -> int:
        spawned.append((name, cmd, env))
        return 4242

    monkeypatch.setattr(cluster, "spawn", spawn)
    assert cluster.start_node(tmp_path, 2) == 4242
    [(name, cmd, env)] = spawned
    assert name == "node2"
    assert env == {"SHARDCRON_NODE_TOKEN": "node-token"}
    assert cmd[1:4] == ["-m", "shardcron", "node"]
    assert "--http-listen" in cmd and cmd[cmd.index("--http-listen") + 1] == "127.0.0.1:7432"
    assert cmd[cmd.index("--listen") + 1] == "127.0.0.1:7402"
    assert cmd[cmd.index("--zk") + 1] == "127.0.0.1:2191"
    assert cmd[cmd.index("--cassandra") + 1] == "127.0.0.11"
    assert cmd[cmd.index("--node-id") + 1] == "node2"
    assert "--tls-client-ca" in cmd and "--auth-file" in cmd
    assert "node-token" not in cmd  # the token goes through the environment only
    assert cluster.node_http_url(2) == "https://127.0.0.1:7432"
