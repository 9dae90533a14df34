"""Secret env values sealed at rest (``coordinator/sealing.py``): what a key file holds,
what seals and opens, what a value that does not open does, and the api's use of it
on a real SQLite store."""

from __future__ import annotations

import base64
import os
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardcron.client.errors import InvalidArgument
from shardcron.client.types import SECRET_PLACEHOLDER, CommandTask, HandlerTask, JobSpec
from shardcron.coordinator.sealing import (
    SEALED_PREFIX,
    KeyFileError,
    KeyRing,
    SecretUnopenable,
    load_key_ring,
    opened_task,
)
from shardcron.coordinator.secrets import secrets_for_create, secrets_for_update
from shardcron.main import cli

SECRET = "hunter2-never-stored"


def key_line(key_id: str) -> str:
    return f"{key_id} {base64.b64encode(os.urandom(32)).decode()}\n"


def ring(tmp_path: Path, *lines: str) -> KeyRing:
    path = tmp_path / f"keys-{len(list(tmp_path.iterdir()))}"
    path.write_text("# shardcron secret keys\n" + "".join(lines))
    path.chmod(0o600)
    return load_key_ring(str(path))


def spec(secret_env: dict[str, str]) -> JobSpec:
    return JobSpec(name="j", task=CommandTask(argv=("true",), secret_env=secret_env))


def test_a_sealed_value_holds_neither_the_value_nor_opens_under_another_name(
    tmp_path: Path,
) -> None:
    keys = ring(tmp_path, key_line("k1"))
    sealed = keys.seal("DB_PASSWORD", SECRET)
    assert sealed.startswith(f"{SEALED_PREFIX}k1:") and SECRET not in sealed
    assert keys.seal("DB_PASSWORD", SECRET) != sealed  # a fresh nonce each time
    assert keys.open("DB_PASSWORD", sealed) == SECRET
    with pytest.raises(SecretUnopenable, match=r"secret_env\[OTHER\] does not open"):
        keys.open("OTHER", sealed)
    tampered = sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1]
    with pytest.raises(SecretUnopenable, match="altered"):
        keys.open("DB_PASSWORD", tampered)


def test_the_first_key_seals_and_every_key_opens(tmp_path: Path) -> None:
    old_line, new_line = key_line("2026-01"), key_line("2026-11")
    old = ring(tmp_path, old_line)
    sealed_before = old.sealed_spec(spec({"A": "a", "B": "b"}))
    rotated = ring(tmp_path, new_line, old_line)
    task = opened_task(rotated, sealed_before.task)
    assert isinstance(task, CommandTask) and task.secret_env == {"A": "a", "B": "b"}
    # an update opens what it can and seals again with the first key
    resealed = rotated.sealed_spec(rotated.opened_spec(sealed_before))
    assert isinstance(resealed.task, CommandTask)
    assert all(v.startswith(f"{SEALED_PREFIX}2026-11:") for v in resealed.task.secret_env.values())
    only_new = ring(tmp_path, new_line)
    assert opened_task(only_new, resealed.task) == task
    with pytest.raises(SecretUnopenable, match="key '2026-01', which this node's"):
        opened_task(only_new, sealed_before.task)


def test_a_sealed_value_without_any_key_ring_never_reaches_a_lease(tmp_path: Path) -> None:
    sealed = ring(tmp_path, key_line("k1")).sealed_spec(spec({"TOKEN": SECRET}))
    with pytest.raises(SecretUnopenable, match="no --secrets-key-file"):
        opened_task(None, sealed.task)
    plain = spec({"TOKEN": SECRET})  # stored before any key file: given as stored
    assert opened_task(None, plain.task) is plain.task
    handler = HandlerTask(name="h")
    assert opened_task(None, handler) is handler


def test_opened_spec_keeps_what_this_ring_cannot_open(tmp_path: Path) -> None:
    other = ring(tmp_path, key_line("gone")).sealed_spec(spec({"OLD": "o"}))
    keys = ring(tmp_path, key_line("k1"))
    assert isinstance(other.task, CommandTask)
    merged = spec({**other.task.secret_env, "NEW": SECRET})
    opened = keys.opened_spec(keys.sealed_spec(merged))
    assert isinstance(opened.task, CommandTask)
    assert opened.task.secret_env == {"OLD": other.task.secret_env["OLD"], "NEW": SECRET}


def test_a_value_sent_in_the_sealed_form_is_refused() -> None:
    with pytest.raises(InvalidArgument, match=r"spec\.task\.command\.secret_env\[X\]: a value"):
        secrets_for_create(spec({"X": f"{SEALED_PREFIX}k1:abc"}))
    stored = spec({"X": f"{SEALED_PREFIX}k1:abc"})  # a stored value may be; a sent one not
    kept = secrets_for_update(stored, spec({"X": SECRET_PLACEHOLDER}))
    assert kept.task == stored.task
    with pytest.raises(InvalidArgument, match=r"secret_env\[Y\]"):
        secrets_for_update(stored, spec({"Y": f"{SEALED_PREFIX}k9:zz"}))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "no key"),
        ("# only a comment\n", "no key"),
        ("k1\n", "line 1: want 'KEY_ID BASE64_KEY', got 1 words"),
        ("k1 !!!notbase64\n", "line 1: key 'k1' is not base64"),
        (f"k1 {base64.b64encode(b'short').decode()}\n", "key 'k1' is 5 bytes, want 32"),
        ("bad/id " + key_line("x").split()[1] + "\n", "line 1: key id"),
        (key_line("k1") + key_line("k1"), "line 2: key id 'k1' is given twice"),
    ],
)
def test_a_key_file_that_cannot_be_used_names_its_line(
    tmp_path: Path, text: str, reason: str
) -> None:
    path = tmp_path / "keys"
    path.write_text(text)
    with pytest.raises(KeyFileError, match=reason):
        load_key_ring(str(path))


def test_a_key_file_others_may_read_is_used_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "keys"
    path.write_text(key_line("k1"))
    path.chmod(0o644)
    assert load_key_ring(str(path)).sealing_id == "k1"
    assert "chmod 600" in caplog.text


@pytest.mark.parametrize("command", ["dev", "node"])
def test_a_bad_key_file_stops_the_start_before_anything_is_written(
    command: str, tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    keys.write_text("k1 c2hvcnQ=\n")
    data = tmp_path / "data"
    data.mkdir()
    args = [command, "--secrets-key-file", str(keys)]
    if command == "dev":
        args += ["--data-dir", str(data)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "--secrets-key-file" in result.output and "line 1" in result.output
    assert not any(data.iterdir())


def stored_bytes(db: Path) -> bytes:
    """Every byte SQLite keeps for the store file ``db`` (its WAL checkpointed)."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return b"".join(p.read_bytes() for p in db.parent.glob(f"{db.name}*"))


async def test_the_api_stores_values_sealed_and_replies_with_placeholders(
    tmp_path: Path,
) -> None:
    from shardcron.coordinator.api import JobsApi
    from shardcron.coordinator.metrics import Metrics
    from shardcron.coordinator.sqlite.store import SqliteStore
    from tests.support.links import HintLog

    keys = ring(tmp_path, key_line("k1"))
    db = tmp_path / "store.db"
    store = SqliteStore(db)
    await store.open()
    try:
        api = JobsApi(store, HintLog(), Metrics(), keys=keys)
        [(job, _)] = await api.create_jobs("o", [(spec({"TOKEN": SECRET}), "")])
        stored = await store.get_job("o", job.id)
        assert isinstance(stored.spec.task, CommandTask)
        assert stored.spec.task.secret_env["TOKEN"].startswith(f"{SEALED_PREFIX}k1:")
        updated = await api.update_job(
            "o", job.id, spec({"TOKEN": SECRET_PLACEHOLDER, "MORE": "m"}), job.version
        )
        task = opened_task(keys, updated.spec.task)
        assert isinstance(task, CommandTask) and task.secret_env == {"TOKEN": SECRET, "MORE": "m"}
    finally:
        await store.close()
    kept = stored_bytes(db)
    assert f"{SEALED_PREFIX}k1:".encode() in kept and b"MORE" in kept
    assert SECRET.encode() not in kept
