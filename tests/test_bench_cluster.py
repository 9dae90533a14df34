"""The cluster bench system's parts that need no cluster: which job ids ``run_times``
reads the runs of (``named_ids``, over the owner's ids newest first), and the node
command ``deploy.cluster.start_node`` starts again after a crash."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.systems.shardcron_cluster import name_pages, named_ids
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


class _RestartingRows:
    """Its own iterator, set back to its first row at every ``iter()``, as the driver's
    ResultSet is."""

    def __init__(self, ids: list[str]) -> None:
        self.ids, self.at = ids, 0

    def __iter__(self) -> _RestartingRows:
        self.at = 0
        return self

    def __next__(self) -> str:
        if self.at == len(self.ids):
            raise StopIteration
        self.at += 1
        return self.ids[self.at - 1]


def test_name_pages_walk_the_ids_once_and_read_names_page_by_page() -> None:
    asked: list[list[str]] = []
    known = {"j5": "s1-cron", "j4": "s1-cron", "j3": "s1", "j1": "s1"}

    def names(page: list[str]) -> dict[str, str]:
        asked.append(page)
        assert len(asked) <= 6, "the same ids read over and over"
        return {i: known[i] for i in page if i in known}

    rows = _RestartingRows(["j5", "j4", "j3", "j2", "j1"])
    assert named_ids(name_pages(rows, names, size=2), "s1-cron") == ["j5", "j4"]
    assert asked == [["j5", "j4"], ["j3", "j2"]]  # the third page is never read
    pages = list(name_pages(rows, names, size=2))
    assert pages == [
        [("j5", "s1-cron"), ("j4", "s1-cron")],
        [("j3", "s1"), ("j2", None)],
        [("j1", "s1")],
    ]


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
