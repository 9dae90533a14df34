"""The data directory's lock, in one process: flock conflicts between two open files
of one process too, so the second taker is refused as another process would be."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shardcron.coordinator.data_dir_lock import DataDirInUse, lock_data_dir


def test_a_held_data_directory_is_refused_naming_the_holder(tmp_path: Path) -> None:
    held = lock_data_dir(tmp_path / "data")
    try:
        with pytest.raises(DataDirInUse) as e:
            lock_data_dir(tmp_path / "data")
        assert e.value.holder_pid == os.getpid()
        assert f"in use by pid {os.getpid()}" in str(e.value)
    finally:
        held.release()
    again = lock_data_dir(tmp_path / "data")
    assert again.held
    again.release()
    assert not again.held


def test_a_stale_lock_file_keeps_nobody_out(tmp_path: Path) -> None:
    (tmp_path / "lock").write_text("999999\n")  # left by a process that died
    held = lock_data_dir(tmp_path)
    assert (tmp_path / "lock").read_text() == f"{os.getpid()}\n"
    held.release()
