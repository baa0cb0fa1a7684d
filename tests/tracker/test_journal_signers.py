"""Once a tracker's journal holds a signed entry, a later unsigned entry or one by another key is a finding."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from aos.canonical import canonical_json
from aos.signing import generate_keypair, load_signer
from observe.cli.root import main
from tests.helpers.backends import PlainClient
from tracker import journal, records
from tracker.db import connect


def _first_later_entry() -> int:
    """The seq of the first journal entry written after the signed migrations and milestone (one entry per
    journalled migration, then the milestone)."""
    from tracker.backends import JOURNAL_VERSION
    from tracker.db import migrations

    return len(migrations()) - JOURNAL_VERSION + 1 + 1


_FIRST_LATER = _first_later_entry()


def tool(db: str, *args: str, key: Path | None = None) -> None:
    """Run ``alpha tracker`` (signing with ``key`` when given); it must succeed."""
    signing = ["--signing-key", str(key)] if key is not None else []
    result = CliRunner().invoke(main, ["tracker", "--db", db, *signing, *args])
    assert 0 == result.exit_code, result.output


def audited(db: str) -> tuple[int, str]:
    """``alpha tracker audit`` without --journal-key: its exit code and stdout."""
    result = CliRunner().invoke(main, ["tracker", "--db", db, "audit"])
    return result.exit_code, result.stdout


def signed_tracker(tracker_db: str, tmp_path: Path) -> tuple[Path, str]:
    """A tracker whose every entry so far is signed by one key: the key file and its id."""
    key, _ = generate_keypair(tmp_path / "tracker")
    tool(tracker_db, "init", key=key)
    tool(tracker_db, "milestone", "add", "M1", "first", key=key)
    assert 0 == audited(tracker_db)[0]
    return key, load_signer(key).key_id


def test_the_tool_without_the_key_appends_an_unsigned_entry(tracker_db: str, tmp_path: Path) -> None:
    """An entry appended without --signing-key after signed ones is named, and audit exits 1."""
    _, key_id = signed_tracker(tracker_db, tmp_path)
    tool(tracker_db, "milestone", "add", "M2", "second")
    code, out = audited(tracker_db)
    assert 1 == code
    assert f"journal entry {_FIRST_LATER} is not signed, though entry 0 before it is (by key {key_id})" in out


def test_an_entry_signed_by_another_key(tracker_db: str, tmp_path: Path) -> None:
    """An entry signed by a key other than the one that signed the earlier entries is named."""
    _, key_id = signed_tracker(tracker_db, tmp_path)
    other, _ = generate_keypair(tmp_path / "other")
    tool(tracker_db, "milestone", "add", "M2", "second", key=other)
    code, out = audited(tracker_db)
    assert 1 == code
    other_id = load_signer(other).key_id
    assert f"journal entry {_FIRST_LATER} is signed by key {other_id}, not by key {key_id} that signed entry 0" in out


def test_a_plain_client_forges_a_chained_unsigned_entry(tracker_db: str, tmp_path: Path) -> None:
    """A SQL client edits a row and appends a chained, unsigned entry that records exactly its edit: named."""
    _, key_id = signed_tracker(tracker_db, tmp_path)
    raw = PlainClient(tracker_db, autocommit=True)
    raw.execute("UPDATE milestones SET title = 'forged' WHERE id = 'M1'")
    conn = connect(tracker_db)
    edit = journal.change(conn, "milestones", "M1")
    conn.close()
    seq, prev = raw.execute("SELECT seq, hash FROM journal ORDER BY seq DESC LIMIT 1").fetchone()
    body = {"seq": seq + 1, "at": "2026-01-01T00:00:00Z", "op": "milestone.edit", "args": {}, "changes": [edit]}
    text = canonical_json(body)
    raw.execute(
        "INSERT INTO journal (seq, prev, hash, entry, key_id, signature) VALUES (?, ?, ?, ?, NULL, NULL)",
        (seq + 1, prev, journal.entry_hash(prev, text), text),
    )
    raw.close()
    code, out = audited(tracker_db)
    # Before the rule the replay matched the tables and the chain held: "journal intact", exit 0.
    assert 1 == code, out
    assert f"journal entry {seq + 1} is not signed, though entry 0 before it is (by key {key_id})" in out
    result = CliRunner().invoke(main, ["tracker", "--db", tracker_db, "audit", "--json"])
    problems = json.loads(result.stdout)["journal"]["problems"]
    assert [f"journal entry {seq + 1} is not signed, though entry 0 before it is (by key {key_id})"] == problems


def test_an_unsigned_journal_stays_clean(tracker_db: str) -> None:
    """A journal that was never signed audits clean: the rule starts at the first signed entry."""
    tool(tracker_db, "init")
    conn = connect(tracker_db)
    records.add_milestone(conn, "M1", "first")
    conn.close()
    assert 0 == audited(tracker_db)[0]
