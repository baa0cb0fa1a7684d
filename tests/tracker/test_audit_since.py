"""`alpha tracker audit` in bounded memory, and `--since ENTRY`: only what the journal entries from there wrote.

On both backends: the journal and the tables are read a page at a time (a page of one row gives the
report a whole read gives); `--since` re-verifies the streams attached from that entry on and compares
the rows written since, and says which entries it checked; the full audit still finds what `--since`
cannot (a row no entry since then wrote, edited outside the tool).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.backends import without_triggers
from tests.helpers.cli import invoke
from tracker import journal, records
from tracker.attach import attach
from tracker.audit import audit
from tracker.db import connect
from tracker.testing import ExampleTracker, example_tracker, flip_byte, sealed_stream


def _next_entry(t: ExampleTracker) -> int:
    return int(t.conn.execute("SELECT max(seq) FROM journal").fetchone()[0]) + 1


def _late_run(t: ExampleTracker, folder: Path) -> tuple[str, Path, str]:
    """A run started, a stream attached to it and the run finished: after the entry the test noted."""
    path = folder / "late.aos"
    run = records.start_run(t.conn, experiment="distributed", lane="distributed-device")
    info = sealed_stream(path, verdict="pass", scope="static")
    attach(t.conn, path, run)
    records.finish_run(t.conn, run, "completed")
    return run, path, info.stream_id


def test_since_checks_the_streams_and_rows_written_from_there(tracker_db: str, tmp_path: Path) -> None:
    t = example_tracker(tracker_db, tmp_path)
    since = _next_entry(t)
    _run, late, late_id = _late_run(t, tmp_path)
    assert audit(t.conn, since=since).ok
    flip_byte(late)
    flip_byte(t.streams["static"])  # attached before ``since``: the full audit's to find
    report = audit(t.conn, since=since)
    assert [(late_id, "changed")] == [(f.stream_id, f.state) for f in report.streams]
    assert (since, 3) == (report.journal_check.since, report.journal_check.entries)
    full = audit(t.conn)
    assert {late_id, t.stream_ids["static"]} == {f.stream_id for f in full.streams if f.state == "changed"}
    code_since = invoke("tracker", "--db", str(t.db), "audit", "--since", str(since))
    assert 1 == code_since.exit_code
    assert f"3 entries from entry {since}" in code_since.stdout
    assert code_since.stdout.endswith("audit: 1 stream: 0 intact, 1 changed, 0 missing; rules intact; journal intact\n")


def test_since_finds_a_row_written_since_edited_and_only_the_full_audit_an_older_one(
    tracker_db: str, tmp_path: Path
) -> None:
    t = example_tracker(tracker_db, tmp_path)
    since = _next_entry(t)
    run, _, _ = _late_run(t, tmp_path)
    t.conn.close()
    without_triggers(t.db, "UPDATE runs SET note = 'edited later' WHERE id = ?", args=(run,))
    without_triggers(t.db, "UPDATE items SET title = 'edited earlier' WHERE id = 'N3'")
    conn = connect(t.db)
    try:
        said = audit(conn, since=since).journal
        whole = audit(conn).journal
    finally:
        conn.close()
    assert [f"runs {run!r}: note is 'edited later' in the table, the journal recorded None"] == said
    assert said[0] in whole
    assert (
        "items 'N3': title is 'edited earlier' in the table, the journal recorded 'Publish the static report'" in whole
    )


def test_since_checks_the_chain_from_there(tracker_db: str, tmp_path: Path) -> None:
    """An entry from ``since`` on whose text was edited (its hash kept) is named; the entries before are not read
    as evidence of anything but the tracker's id, schema and first signer."""
    t = example_tracker(tracker_db, tmp_path)
    since = _next_entry(t)
    _late_run(t, tmp_path)
    t.conn.close()
    without_triggers(t.db, "UPDATE journal SET entry = entry || ' ' WHERE seq = ?", args=(since + 1,))
    conn = connect(t.db)
    try:
        report = audit(conn, since=since)
    finally:
        conn.close()
    assert any(f"journal entry {since + 1}: its hash does not follow" in p for p in report.journal)


@pytest.mark.parametrize("edit", [None, "UPDATE items SET title = 'x' WHERE id = 'N2'", "DELETE FROM item_deps"])
def test_pages_of_one_row_give_the_report_a_whole_read_gives(
    tracker_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: str | None
) -> None:
    """Keyset paging, single and composite keys (item_deps), over both backends: the same findings in the same
    order, a page of one row or of thousands."""
    t = example_tracker(tracker_db, tmp_path)
    _late_run(t, tmp_path)
    t.conn.close()
    if edit is not None:
        without_triggers(t.db, edit)
    conn = connect(t.db)
    try:
        whole = audit(conn).as_dict()
        monkeypatch.setattr(journal, "PAGE", 1)
        paged = audit(conn).as_dict()
    finally:
        conn.close()
    assert whole == paged
    assert (edit is None) == whole["ok"]


def test_since_holds_later_entries_to_the_key_that_signed_an_earlier_one(tracker_db: str, tmp_path: Path) -> None:
    """Entries signed before ``since`` still bind those after it: one appended without the key is named."""
    from aos.signing import generate_keypair, load_signer

    key, _ = generate_keypair(tmp_path / "tracker")
    for args in (["init"], ["milestone", "add", "M1", "first"]):
        assert 0 == invoke("tracker", "--db", tracker_db, "--signing-key", str(key), *args).exit_code
    conn = connect(tracker_db)
    since = int(conn.execute("SELECT max(seq) FROM journal").fetchone()[0]) + 1
    conn.close()
    assert 0 == invoke("tracker", "--db", tracker_db, "milestone", "add", "M2", "second").exit_code
    result = invoke("tracker", "--db", tracker_db, "audit", "--since", str(since))
    assert 1 == result.exit_code
    key_id = load_signer(key).key_id
    assert f"journal entry {since} is not signed, though entry 0 before it is (by key {key_id})" in result.stdout
