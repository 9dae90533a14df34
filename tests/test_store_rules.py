"""The rules both stores share (coordinator/store_rules.py), tested on their own:
page tokens, the run-state order, the list filters, what a JobProgress writes and
the store layout. The contract suite checks that each store applies them."""

from __future__ import annotations

import base64
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from shardcron.client.errors import InvalidArgument
from shardcron.client.types import FINAL_RUN_STATES, JobState, Page, RunState
from shardcron.coordinator.rows import BadRowLog, UnreadableRow
from shardcron.coordinator.sqlite.schema import UPSERT_RUN
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import JobProgress
from shardcron.coordinator.store_rules import (
    ACTIVE_RUN_STATES,
    ITEM_FRAMING_BYTES,
    LISTED_JOB_STATES,
    JobFilter,
    PageKind,
    SchemaMismatch,
    StoreLayout,
    bytes_in,
    check_schema,
    clamp_page_size,
    cut_pieces,
    fit_page,
    keep_tail,
    make_page,
    make_row_page,
    output_head,
    output_window,
    page_token,
    page_token_after,
    place_output,
    progress_write,
    run_expires_at,
    run_state_order,
    run_state_wanted,
    state_order_sql,
)
from tests.support.store_builders import make_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)

# --------------------------------------------------------------------------- page tokens


@pytest.mark.parametrize("kind", list(PageKind))
def test_a_page_token_names_the_id_it_follows(kind: PageKind) -> None:
    token = page_token(kind, "01JABC:with-colon")
    assert page_token_after(kind, token) == "01JABC:with-colon"
    assert page_token_after(kind, "") is None  # the first page


def test_tokens_already_issued_still_read() -> None:
    issued = base64.urlsafe_b64encode(b"job:01JABC").decode()  # the format in use
    assert page_token_after(PageKind.JOBS, issued) == "01JABC"


@pytest.mark.parametrize(
    "token",
    [
        "garbage!",
        "%%%",
        "x" * 7,
        base64.urlsafe_b64encode(b"nope").decode(),  # no kind
        base64.urlsafe_b64encode(b"job:").decode(),  # no id
        base64.urlsafe_b64encode(b"\xff\xfe:1").decode(),  # not text
        page_token(PageKind.RUNS, "01JABC"),  # another listing's token
    ],
)
def test_a_tampered_or_foreign_page_token_is_an_invalid_argument(token: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        page_token_after(PageKind.JOBS, token)
    assert err.value.field == "page_token"


def test_a_page_offers_a_token_only_when_more_items_were_found() -> None:
    ids = [f"id{i}" for i in range(5)]
    full = make_page(PageKind.JOBS, ids, 4, str)
    assert full.items == ids[:4]
    assert page_token_after(PageKind.JOBS, full.next_page_token) == "id3"
    last = make_page(PageKind.JOBS, ids[:4], 4, str)
    assert (last.items, last.next_page_token) == (ids[:4], "")


def test_a_page_of_rows_skips_unreadable_rows_and_still_offers_the_next_page() -> None:
    """A row that cannot be decoded, last on a page, made the page look like the last
    one: the token comes from the rows read, not from the items kept."""

    def decode(row: tuple[str, ...]) -> str:
        if row[1] == "bad":
            raise UnreadableRow("jobs", row[0], "bad")
        return row[0]

    rows = [("id0", "ok"), ("id1", "bad"), ("id2", "bad")]
    counted: list[str] = []
    bad_rows = BadRowLog()
    bad_rows.count_into(counted.append)
    page = make_row_page(PageKind.JOBS, rows, 2, decode, bad_rows)
    assert page.items == ["id0"]
    assert page_token_after(PageKind.JOBS, page.next_page_token) == "id1"
    last = make_row_page(PageKind.JOBS, rows[2:], 2, decode, bad_rows)
    assert (last.items, last.next_page_token) == ([], "")
    make_row_page(PageKind.JOBS, rows, 2, decode, bad_rows)
    assert counted == ["jobs", "jobs"]  # once per row id


@pytest.mark.parametrize(("asked", "served"), [(-5, 1), (0, 1), (1, 1), (250, 250), (10**6, 1000)])
def test_page_sizes_are_clamped_never_refused(asked: int, served: int) -> None:
    assert clamp_page_size(asked) == served


# --------------------------------------------------------------------------- state order


def test_every_run_state_has_a_place_and_final_states_share_the_last() -> None:
    order = [run_state_order(s) for s in (RunState.PENDING, RunState.LEASED, RunState.RUNNING)]
    assert order == sorted(set(order))
    finals = {run_state_order(s) for s in FINAL_RUN_STATES}
    assert len(finals) == 1 and finals.pop() > max(order)
    assert set(ACTIVE_RUN_STATES) == set(RunState) - FINAL_RUN_STATES
    assert run_state_order("LEASED") == run_state_order(RunState.LEASED)  # as stored


@pytest.mark.parametrize("stored", [*RunState, "PARKED"])  # PARKED: a newer version's
@pytest.mark.parametrize("written", list(RunState))
def test_the_sql_state_order_is_the_state_order(stored: str, written: RunState) -> None:
    conn = sqlite3.connect(":memory:")
    sql = f"SELECT {state_order_sql(':new')} >= {state_order_sql(':old')}"
    (overwrites,) = conn.execute(sql, {"new": str(written), "old": str(stored)}).fetchone()
    assert bool(overwrites) == (run_state_order(written) >= run_state_order(stored))


def test_the_sqlite_upsert_keeps_the_state_order() -> None:
    assert state_order_sql("excluded.state") in UPSERT_RUN
    assert state_order_sql("runs.state") in UPSERT_RUN


# --------------------------------------------------------------------------- filters


def test_listing_jobs_without_states_leaves_out_only_deleted_jobs() -> None:
    assert JobFilter.of(frozenset(), "", None).states == LISTED_JOB_STATES
    assert frozenset(JobState) - {JobState.DELETED} == LISTED_JOB_STATES
    deleted = make_job(state=JobState.DELETED)
    assert not JobFilter.of(frozenset(), "", None).matches(deleted)
    assert JobFilter.of(frozenset({JobState.DELETED}), "", None).matches(deleted)


def test_a_job_filter_needs_the_state_the_prefix_and_every_label() -> None:
    job = make_job(name="etl-daily", labels={"env": "prod", "team": "data"})
    assert JobFilter.of(frozenset(), "etl", {"env": "prod"}).matches(job)
    assert JobFilter.of(frozenset(), "", {"env": "prod", "team": "data"}).matches(job)
    assert not JobFilter.of(frozenset(), "daily", None).matches(job)
    assert not JobFilter.of(frozenset(), "", {"env": "prod", "team": "web"}).matches(job)
    assert not JobFilter.of(frozenset(), "", {"missing": ""}).matches(job)
    assert not JobFilter.of(frozenset({JobState.PAUSED}), "", None).matches(job)


def test_listing_runs_without_states_lists_every_state() -> None:
    assert all(run_state_wanted(frozenset(), s) for s in RunState)
    wanted = frozenset({RunState.FAILED})
    assert run_state_wanted(wanted, "FAILED") and not run_state_wanted(wanted, "PENDING")


# --------------------------------------------------------------------------- progress


def test_an_empty_next_fire_key_clears_the_next_fire() -> None:
    write = progress_write(JobProgress(job_id="j", next_fire_key="", next_fire_at=T0))
    assert write.columns == {"next_fire_at": None, "next_fire_key": ""}


def test_progress_writes_only_the_fields_it_names() -> None:
    p = JobProgress(job_id="j", next_fire_at=T0, next_fire_key="k", consecutive_failures=2)
    write = progress_write(p)
    assert write.columns == {"next_fire_at": T0, "next_fire_key": "k", "consecutive_failures": 2}
    assert write.state is None
    assert progress_write(JobProgress(job_id="j")).columns == {}


def test_a_pause_reason_sent_with_a_state_goes_only_where_the_state_goes() -> None:
    paused = progress_write(JobProgress(job_id="j", state=JobState.PAUSED, pause_reason="r"))
    assert (paused.columns, paused.state, paused.state_reason) == ({}, JobState.PAUSED, "r")
    alone = progress_write(JobProgress(job_id="j", pause_reason="r"))
    assert (alone.columns, alone.state) == ({"pause_reason": "r"}, None)


def test_progress_moves_a_job_only_to_completed_or_paused() -> None:
    assert progress_write(JobProgress(job_id="j", state=JobState.COMPLETED)).state == (
        JobState.COMPLETED
    )
    for state in (JobState.ACTIVE, JobState.DELETED):
        assert progress_write(JobProgress(job_id="j", state=state)).state is None


def test_an_updates_progress_writes_no_state_and_no_pause_reason() -> None:
    p = JobProgress(job_id="j", next_fire_key="k", state=JobState.PAUSED, pause_reason="r")
    write = progress_write(p, in_update=True)
    assert (write.columns, write.state) == ({"next_fire_key": "k"}, None)


# --------------------------------------------------------------------------- layout


@pytest.mark.parametrize(
    "bad", [{"shard_count": 0}, {"bucket_seconds": 0}, {"output_cap_bytes": -1}]
)
def test_a_layout_out_of_range_is_refused(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        StoreLayout(**bad)


def test_a_store_of_another_version_or_layout_is_refused() -> None:
    layout = StoreLayout(shard_count=8, bucket_seconds=60)
    check_schema("here", (1, 8, 60), layout=layout, version=1)
    with pytest.raises(SchemaMismatch, match="schema 2"):
        check_schema("here", (2, 8, 60), layout=layout, version=1)
    with pytest.raises(SchemaMismatch, match="here was created with shard_count=64"):
        check_schema("here", (1, 64, 60), layout=layout, version=1)
    with pytest.raises(SchemaMismatch, match="bucket_seconds=3600"):
        check_schema("here", (1, 8, 3600), layout=layout, version=1)


async def test_sqlite_reopened_with_another_shard_count_is_refused_not_stranding_runs(
    tmp_path: Path,
) -> None:
    """A run's shard is fixed when it is written: a file reopened with fewer shards
    left the runs of the other shards where no poller ever scans again."""
    store = SqliteStore(tmp_path / "s.db", shard_count=64, bucket_seconds=60)
    await store.open()
    await store.close()
    for other in (
        {"shard_count": 8, "bucket_seconds": 60},
        {"shard_count": 64, "bucket_seconds": 3600},
    ):
        with pytest.raises(SchemaMismatch, match="was created with shard_count=64"):
            await SqliteStore(tmp_path / "s.db", **other).open()
    again = SqliteStore(tmp_path / "s.db", shard_count=64, bucket_seconds=60, output_cap_bytes=1)
    await again.open()  # the output cap may change
    await again.close()


# --------------------------------------------------------------------------- pages in bytes


def test_a_page_ends_early_when_its_bytes_pass_the_budget() -> None:
    page = Page(items=["a", "b", "c", "d"], next_page_token="after-d")
    per_item = 100 - ITEM_FRAMING_BYTES
    cut = fit_page(PageKind.JOBS, page, [per_item] * 4, str, budget=250)
    assert cut.items == ["a", "b"] and page_token_after(PageKind.JOBS, cut.next_page_token) == "b"
    assert fit_page(PageKind.JOBS, page, [per_item] * 4, str, budget=400) == page  # all fit
    # An item over the budget alone still comes, alone: never an empty page.
    alone = fit_page(PageKind.RUNS, page, [10_000, 1, 1, 1], str, budget=250)
    assert alone.items == ["a"] and page_token_after(PageKind.RUNS, alone.next_page_token) == "a"
    assert fit_page(PageKind.JOBS, Page(items=[]), [], str) == Page(items=[])


# --------------------------------------------------------------------------- output cut


def kept_by_rule(written: bytes, cap: int) -> bytes:
    """What the rule keeps of ``written`` appended at once to an empty output."""
    window = output_window(0, len(written), cap)
    if window is None:
        return written
    head = output_head(len(written), cap, written[window[0] : window[1]], window[0])
    return written[head:]


def test_output_is_cut_at_the_first_line_starting_in_the_last_cap_bytes() -> None:
    written = b"".join(b"line %04d\n" % i for i in range(100))  # 10-byte lines
    kept = kept_by_rule(written, 95)
    assert kept == written[-90:]  # nine whole lines, not a partial tenth
    assert kept_by_rule(written, 100) == written[-100:]  # the cut falls on a line start
    assert kept_by_rule(written[:50], 95) == written[:50]  # under the cap: all of it


def test_a_line_longer_than_the_cap_keeps_its_last_cap_bytes() -> None:
    assert kept_by_rule(b"x" * 500, 100) == b"x" * 100
    # A newline past half the cap would leave too little: the cut is made mid-line.
    written = b"a" * 300 + b"\n" + b"b" * 30
    assert kept_by_rule(written, 100) == written[-100:]
    assert kept_by_rule(b"a" * 300 + b"\n", 100) == (b"a" * 300 + b"\n")[-100:]
    assert kept_by_rule(b"abc", 0) == b""


def test_pieces_are_placed_cut_and_read_back_by_absolute_offset() -> None:
    placed = place_output(10, [("stdout", b"hello "), ("stderr", b""), ("stderr", b"world")])
    assert placed == [(10, "stdout", b"hello "), (16, "stderr", b"world")]
    assert cut_pieces(placed, 12) == [(12, "stdout", b"llo "), (16, "stderr", b"world")]
    assert cut_pieces(placed, 16) == [(16, "stderr", b"world")]
    pieces = [(at, data) for at, _, data in placed]
    assert bytes_in(pieces, (14, 18)) == b"o wo"


@pytest.mark.parametrize("cap", [0, 1, 7, 64])
def test_keep_tail_leaves_what_appending_everything_leaves(cap: int) -> None:
    stored = b"older output\n"
    data = b"".join(b"%d\n" % i for i in range(200)) + b"partial"
    whole, cut = stored + data, stored + keep_tail(data, cap)
    assert kept_by_rule(cut, cap) == kept_by_rule(whole, cap)
    assert len(keep_tail(data, cap)) <= cap + 1


def test_a_final_run_expires_its_retention_after_it_ended_and_no_other_does() -> None:
    t, day = datetime(2030, 1, 1, tzinfo=UTC), timedelta(days=1)
    rule = {"dead_letter": False, "ended_at": t, "due_at": t - day, "retention": day}
    assert run_expires_at(state=RunState.SUCCEEDED, **rule) == t + day
    assert run_expires_at(state=RunState.SKIPPED, **{**rule, "ended_at": None}) == t
    assert run_expires_at(state=RunState.RUNNING, **rule) is None
    assert run_expires_at(state=RunState.FAILED, **{**rule, "dead_letter": True}) is None
    assert run_expires_at(state=RunState.FAILED, **{**rule, "retention": None}) is None
