"""As whom commands run, and where: a uid per owner kept stable on the host, one fixed
user, the runs' private directories, and what the runs' users could read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardcron.worker.containment.hosts import worker_subtree
from shardcron.worker.run_users import (
    FixedUser,
    OwnerUids,
    RunDirs,
    parse_uid_range,
    readable_by_others,
)


def test_each_owner_keeps_its_own_uid_across_workers_of_the_host(tmp_path: Path) -> None:
    uids = tmp_path / "uids"
    first = OwnerUids(200000, 265535, uids)
    a, b = first.user_for("team-a"), first.user_for("team-b")
    assert a is not None and b is not None and a.uid != b.uid
    assert (a.gid, b.gid) == (a.uid, b.uid) and min(a.uid, b.uid) >= 200000
    again = OwnerUids(200000, 265535, uids)  # another worker, or this one restarted
    assert again.user_for("team-b") == b and again.user_for("team-a") == a
    assert oct(uids.stat().st_mode & 0o777) == "0o600"
    assert uids.read_text().splitlines() == [f'{a.uid} "team-a"', f'{b.uid} "team-b"']


def test_owners_whose_first_choice_is_taken_get_the_next_uid_until_none_is_left(
    tmp_path: Path,
) -> None:
    two = OwnerUids(300000, 300001, tmp_path / "uids")
    got = {two.user_for(owner).uid for owner in ("x", "y")}  # type: ignore[union-attr]
    assert got == {300000, 300001}
    with pytest.raises(OSError, match="every uid of 300000-300001 is taken"):
        two.user_for("z")


def test_two_workers_allocating_at_once_never_share_a_uid(tmp_path: Path) -> None:
    """The map is appended under a lock: processes racing for new owners agree."""
    code = (
        "import sys; from pathlib import Path; from shardcron.worker.run_users import OwnerUids;"
        "u = OwnerUids(400000, 400099, Path(sys.argv[1]));"
        "print(*(u.user_for(f'o{i}').uid for i in range(40)))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path / "uids")], stdout=subprocess.PIPE
        )
        for _ in range(3)
    ]
    answers = [p.communicate(timeout=60)[0].split() for p in procs]
    assert answers[0] == answers[1] == answers[2]  # every process: the same uid per owner
    assert len(set(answers[0])) == 40  # and no two owners one uid


@pytest.mark.parametrize(
    ("text", "why"),
    [("200000", "FIRST-LAST"), ("0-10", "0 < FIRST"), ("10-5", "FIRST <= LAST"), ("a-b", "FIRST")],
)
def test_a_bad_uid_range_says_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_uid_range(text)


def test_a_fixed_user_is_a_user_of_the_host_and_never_root() -> None:
    with pytest.raises(ValueError, match="root"):
        FixedUser("root")
    with pytest.raises(ValueError, match="no user"):
        FixedUser("no-such-user-xyz")
    nobody = FixedUser("nobody")
    assert nobody.user_for("anyone") == nobody.user_for("someone else")


def test_a_file_is_readable_by_others_only_with_a_path_they_can_follow(tmp_path: Path) -> None:
    open_dir, closed_dir = tmp_path / "open", tmp_path / "closed"
    open_dir.mkdir(mode=0o755)
    closed_dir.mkdir(mode=0o700)
    tmp_path.chmod(0o755)
    for d in (open_dir, closed_dir):
        (d / "public").write_text("x")
        (d / "public").chmod(0o644)
        (d / "private").write_text("x")
        (d / "private").chmod(0o600)
    ancestors_open = all(p.stat().st_mode & 0o001 for p in tmp_path.resolve().parents)
    assert readable_by_others(open_dir / "public") == ancestors_open
    assert not readable_by_others(open_dir / "private")
    assert not readable_by_others(closed_dir / "public")  # no one else may enter


def test_the_run_directories_of_dead_workers_are_swept_and_a_live_ones_kept(
    tmp_path: Path,
) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    root = tmp_path / "runs"
    mine = RunDirs(root, worker_subtree("live"))
    mine.prepare()
    (mine.base / "r1.1").mkdir()
    dead = root / f"dead@{gone.pid}.12345"  # a pid no process has now, with its start time
    (dead / "r2.1" / "tmp").mkdir(parents=True)
    (dead / "r2.1" / "tmp").chmod(0o500)  # what a command may leave
    assert mine.sweep() == [dead.name]
    assert not dead.exists() and (mine.base / "r1.1").is_dir()
    assert oct(root.stat().st_mode & 0o777) == "0o711" and os.stat(mine.base).st_mode & 0o711
