"""``alpha observe query --store``: the streams of a store's evidence index, verified once, when pushed.

The index answers as verifying every stream would; a stream is re-verified
only when its file's size no longer matches its row (or ``--reverify``/``--key``),
and a file changed in place stops the query when its events are read.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from observe.query.run import run_index_query, run_query
from observe.store import push
from tests.helpers.cli import invoke as alpha_invoke
from tests.helpers.paths import DOCS
from tests.helpers.refusals import refused
from tests.helpers.run import alpha
from tests.helpers.s3 import S3Bucket
from tests.observe.query.test_query import lane_stream
from tracker.testing import flip_byte

pytest.importorskip("duckdb")

TABLES = {
    "streams": "SELECT * EXCLUDE (path) FROM streams ORDER BY stream_id",
    "checks": "SELECT * FROM checks ORDER BY stream_id, name",
    "events": "SELECT * FROM events ORDER BY stream_id, seq",
}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A folder store holding four pushed streams: two lanes, failing checks, steps of known durations."""
    d = tmp_path / "streams"
    d.mkdir()
    lane_stream(d / "a.aos", gate="exit-zero", steps={"build": 5, "test": 70})
    lane_stream(d / "b.aos", gate="exit-zero", exit_code=2, steps={"build": 9})
    lane_stream(d / "c.aos", gate="distributed-device", checks={"static-build": "fail", "preflight": "fail"})
    lane_stream(d / "d.aos", verdict=False)
    out = tmp_path / "store"
    for p in sorted(d.iterdir()):
        push(p, out)
    return out


def stored(store: Path) -> list[Path]:
    return sorted(store.glob("*.aos"))


class TestAnswers:
    @pytest.mark.parametrize("table", sorted(TABLES))
    def test_the_index_answers_as_verifying_every_stream(self, store: Path, table: str) -> None:
        """Each table from the index equals the table of the same streams verified one by one."""
        sql = TABLES[table]
        indexed = run_index_query(sql, str(store))
        verified = run_query(sql, [str(p) for p in stored(store)])
        assert verified.columns == indexed.columns
        assert verified.rows == indexed.rows
        assert len(verified.rows) > 3
        assert [] == indexed.reverified

    def test_documented_examples(self, store: Path) -> None:
        """Every ```sql block of docs/QUERY.md gives the same rows over the index (ties in any order)."""
        for sql in re.findall(r"```sql\n(.*?)```", (DOCS / "QUERY.md").read_text(encoding="utf-8"), re.S):
            verified, indexed = run_query(sql, [str(store)]).rows, run_index_query(sql, str(store)).rows
            assert sorted(map(repr, verified)) == sorted(map(repr, indexed))


class TestReverification:
    def test_none_on_later_queries(self, store: Path) -> None:
        """Pushed streams were verified when they entered the store: no query verifies them again."""
        for _ in range(2):
            r = run_index_query("SELECT count(*) FROM events", str(store))
            assert ([(r.rows[0][0],)], [], 4) == (r.rows, r.reverified, r.streams)
        assert r.rows[0][0] > 20

    def test_reverify_verifies_all(self, store: Path) -> None:
        r = run_index_query("SELECT count(*) FROM streams", str(store), reverify=True)
        assert sorted(map(str, stored(store))) == sorted(r.reverified)
        assert [(4,)] == r.rows

    def test_a_file_of_another_size_is_reverified_and_skipped(self, store: Path) -> None:
        """A stored file that grew no longer matches its row: verified again, refused, skipped."""
        grown = stored(store)[0]
        grown.chmod(0o644)
        with grown.open("ab") as f:
            f.write(b"\0")
        r = run_index_query("SELECT count(*) FROM streams", str(store))
        assert [str(grown)] == r.reverified
        assert [(3,)] == r.rows
        ((path, refusal),) = [(s.path, s.refusal) for s in r.skipped]
        assert (str(grown), True) == (path, refusal.startswith("stream-"))

    def test_other_valid_bytes_under_the_name_are_stream_digest(self, store: Path) -> None:
        """A stored file replaced by another valid stream (of another size) verifies, but is not its name."""
        a, b = stored(store)[:2]
        a.chmod(0o644)
        if a.stat().st_size == b.stat().st_size:
            pytest.fail("the fixture's streams should differ in size")
        shutil.copyfile(b, a)
        r = run_index_query("SELECT count(*) FROM streams", str(store))
        assert [str(a)] == r.reverified
        assert [f"{a}: stream-digest"] == [f"{s.path}: {s.refusal.split(':')[0]}" for s in r.skipped]

    def test_a_file_changed_in_place_stops_the_query_on_its_events(self, store: Path) -> None:
        """Same size, other bytes: the row still answers streams, but reading its events is refused."""
        changed = stored(store)[0]
        changed.chmod(0o644)
        flip_byte(changed)
        r = run_index_query("SELECT count(*) FROM streams", str(store))
        assert ([(4,)], []) == (r.rows, r.reverified)
        assert "stream-seal" == refused(run_index_query, "SELECT count(*) FROM events", str(store)).name
        again = run_index_query("SELECT count(*) FROM streams", str(store), reverify=True)
        assert [(3,)] == again.rows

    def test_a_missing_file_is_skipped(self, store: Path) -> None:
        gone = stored(store)[0]
        gone.unlink()
        r = run_index_query("SELECT count(*) FROM streams", str(store))
        assert [(3,)] == r.rows
        assert [str(gone)] == [s.path for s in r.skipped]
        assert r.skipped[0].refusal.startswith("stream-missing: ")


class TestCommand:
    def test_json_lists_reverified(self, store: Path) -> None:
        r = alpha_invoke("observe", "query", "SELECT count(*) FROM streams", "--store", str(store), "--json")
        assert 0 == r.exit_code, r.stderr
        doc = json.loads(r.stdout)
        assert ([[4]], [], []) == (doc["rows"], doc["skipped"], doc["reverified"])
        r = alpha_invoke("observe", "query", "SELECT 1", "--store", str(store), "--reverify", "--json")
        assert 4 == len(json.loads(r.stdout)["reverified"])

    @pytest.mark.parametrize(
        "args",
        [["SELECT 1"], ["SELECT 1", "x.aos", "--store", "s"], ["SELECT 1", "x.aos", "--reverify"]],
        ids=["neither", "both", "reverify-without-store"],
    )
    def test_usage(self, args: list[str]) -> None:
        r = alpha_invoke("observe", "query", *args)
        assert 2 == r.exit_code
        assert "--store" in r.stderr

    def test_an_s3_store_is_refused(self, s3_bucket: S3Bucket) -> None:
        r = alpha_invoke("observe", "query", "SELECT 1", "--store", s3_bucket.url)
        assert (1, True) == (r.exit_code, r.stderr.startswith("refused: store-url: "))

    def test_help_example_as_written(self, store: Path) -> None:
        """The --help example runs in a folder holding aos-store."""
        shutil.move(store, store.parent / "aos-store")
        done = alpha(
            "observe",
            "query",
            "SELECT verdict, count(*) FROM streams GROUP BY verdict",
            "--store",
            "aos-store",
            cwd=store.parent,
            text=True,
        )
        assert 0 == done.returncode, done.stderr
        assert re.search(r"^pass\s+1$", done.stdout, re.M)
        assert re.search(r"^fail\s+2$", done.stdout, re.M)
