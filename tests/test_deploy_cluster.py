"""``make cluster-down`` keeps the servers' data; ``make cluster-reset`` deletes it.

No server runs here: the state directory is laid out as ``make cluster`` leaves it
(ZooKeeper, Cassandra and S3 gateway directories with data, logs, no live pid), and
``deploy.cluster`` is called as the Makefile calls it.
"""

from __future__ import annotations

from pathlib import Path

from deploy import cluster


def _state_as_make_cluster_leaves_it(state: Path) -> list[Path]:
    data = [
        state / "zookeeper" / "zk1" / "data" / "version-2" / "snapshot.0",
        state / "cassandra" / "cass1" / "data" / "shardcron" / "jobs.db",
        state / "s3" / "data" / "shardcron" / "blobs" / "output" / "part",
    ]
    for f in data:
        f.parent.mkdir(parents=True)
        f.write_text("kept")
    (state / "node1.log").write_text("log")
    (state / "endpoints.json").write_text("{}")
    return data


def test_cluster_down_keeps_zookeeper_cassandra_and_s3_data(tmp_path: Path) -> None:
    data = _state_as_make_cluster_leaves_it(tmp_path)
    cluster.down(tmp_path)
    assert all(f.read_text() == "kept" for f in data)


def test_cluster_reset_deletes_the_data_for_a_fresh_start(tmp_path: Path) -> None:
    _state_as_make_cluster_leaves_it(tmp_path)
    cluster.reset(tmp_path)
    assert not (tmp_path / "zookeeper").exists()
    assert not (tmp_path / "cassandra").exists()
    assert not (tmp_path / "s3").exists()
    assert list(tmp_path.iterdir()) == []
