"""Specs read from job rows: decoded once per distinct JSON text, so the thousands of
jobs a poller reads that were created from one spec share one decoded spec (as the
jobs created from it do), and a text that cannot be decoded still fails every read."""

from __future__ import annotations

import dataclasses

import pytest

from shardcron.coordinator.rows import RowCodec, UnreadableRow
from tests.support.store_builders import make_job

ROWS = RowCodec(null=None)


def test_jobs_stored_with_the_same_spec_read_back_sharing_one_equal_spec() -> None:
    first, second = make_job(name="same"), make_job(name="same")
    other = make_job(name="other")
    a, b, c = (ROWS.row_job(ROWS.job_row(j)) for j in (first, second, other))
    assert a.spec == first.spec and c.spec == other.spec
    assert a.spec is b.spec  # decoded once
    assert c.spec is not a.spec


def test_a_spec_text_that_cannot_be_decoded_fails_every_read() -> None:
    row = list(ROWS.job_row(make_job()))
    row[6] = row[6].replace('"name"', '"no_such_field"', 1)
    for _ in range(2):  # a failed decode is not remembered as a spec
        with pytest.raises(UnreadableRow):
            ROWS.row_job(row)


def test_a_spec_read_back_is_frozen() -> None:
    spec = ROWS.row_job(ROWS.job_row(make_job())).spec
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "changed"  # type: ignore[misc]
