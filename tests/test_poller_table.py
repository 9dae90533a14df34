"""The run table (coordinator/poller/table.py): the one writer of a held run's place
and record, its transitions keeping every index in step (``RunTable.check``)."""

from __future__ import annotations

import re
from pathlib import Path

import shardcron.coordinator.poller as poller_package
from shardcron.client.types import RunReason, RunState
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.poller.endings import Outcome
from tests.support.held_runs import T0, Held, job

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


def test_a_run_ends_once_whatever_ends_it_again() -> None:
    """A rule that raises after a run's end (``Isolated``) ended it a second time: its
    end was counted again and its record overwritten by FAILED INTERNAL_ERROR."""
    metrics = Metrics()
    h = Held(metrics=metrics)
    slot = h.slot(job())
    done = Outcome(state=RunState.SUCCEEDED, reason=RunReason.NONE)
    final = h.ends.end(slot, done, h.turn, T0)
    assert h.ends.end(slot, done, h.turn, T0) == final
    h.ends.fault(slot, RuntimeError("after its end"), h.turn, T0, where="result")
    assert h.ended(slot) == final and final.state == RunState.SUCCEEDED
    value = metrics.registry.get_sample_value
    assert value("shardcron_runs_final_total", {"state": "SUCCEEDED", "reason": "NONE"}) == 1
    h.table.check()
