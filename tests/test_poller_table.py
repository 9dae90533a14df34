"""The run table (coordinator/poller/table.py): the one writer of a held run's place
and record, its transitions keeping every index in step (``RunTable.check``)."""

from __future__ import annotations

import re
from pathlib import Path

import shardcron.coordinator.poller as poller_package

# a write of a slot's place, phase, run record or worker, or a Slot built in a place
WRITES = re.compile(r"\.(place|phase|run|worker)\s*=[^=]|\b(place|phase)\s*=\s*(Place|Phase)\.")


def test_only_the_table_writes_a_held_runs_place_and_record() -> None:
    package = Path(poller_package.__file__).parent
    writes = [
        f"{path.name}:{n}: {line.strip()}"
        for path in sorted(package.glob("*.py"))
        if path.name != "table.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if WRITES.search(line)
    ]
    assert writes == []
