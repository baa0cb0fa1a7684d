"""``alpha observe query --store``: the streams of a store's evidence index, verified once, when pushed.

The index answers as verifying every stream would; a stream is re-verified
only when its file's size no longer matches its row (or ``--reverify``/``--key``),
and a file changed in place stops the query when its events are read.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from blake3 import blake3

from aos.reader import StreamFile
from aos.verify import verify_stream
from gates.testing import SyntheticStream
from observe.query.run import run_index_query, run_query
from observe.store import open_store, push
from observe.store_index import index_prefix, stream_schema
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
        # two of another size (the fixture's streams' sizes vary with their times; some may be equal)
        a, b = next((a, b) for a in stored(store) for b in stored(store) if a.stat().st_size != b.stat().st_size)
        a.chmod(0o644)
        shutil.copyfile(b, a)
        r = run_index_query("SELECT count(*) FROM streams", str(store))
        assert [str(a)] == r.reverified
        assert [f"{a}: stream-digest"] == [f"{s.path}: {s.refusal.split(':')[0]}" for s in r.skipped]

    def test_a_file_changed_in_place_stops_the_query_on_its_events(self, store: Path, tmp_path: Path) -> None:
        """Same size, a byte before the tail changed: the row still answers streams (its verdict is the
        sealed one, read from the tail), but reading its events is refused."""
        push(two_batch_stream(tmp_path / "two.aos"), store)
        changed = store / f"{verify_stream(tmp_path / 'two.aos').file_blake3}.aos"
        with StreamFile(changed) as f:
            first = f.schema_end
        tail = row_of(store, changed)["tail_offset"]
        assert tail > first + 200
        changed.chmod(0o644)
        flip_byte(changed, (first + tail) // 2)
        r = run_index_query("SELECT count(*) FROM streams", str(store))
        assert ([(5,)], [], []) == (r.rows, r.reverified, r.mismatched)
        assert "stream-seal" == refused(run_index_query, "SELECT count(*) FROM events", str(store)).name
        again = run_index_query("SELECT count(*) FROM streams", str(store), reverify=True)
        assert [(4,)] == again.rows

    def test_a_missing_file_is_skipped(self, store: Path) -> None:
        gone = stored(store)[0]
        gone.unlink()
        r = run_index_query("SELECT count(*) FROM streams", str(store))
        assert [(3,)] == r.rows
        assert [str(gone)] == [s.path for s in r.skipped]
        assert r.skipped[0].refusal.startswith("stream-missing: ")


def two_batch_stream(path: Path, *, seed: int = 1, signer: Any = None) -> Path:
    """A sealed stream of three batches: output (about 2 kB), then the exit and the verdict, then the seal."""
    import random

    from aos.writer import StreamWriter

    s = SyntheticStream(gate="exit-zero")
    s.output("stdout", random.Random(seed).randbytes(2000))
    s.exit(0)
    s.add("verdict", {"gate": "exit-zero", "verdict": "pass", "scope": "command", "checks": []})
    w = StreamWriter(path, background_flush=False, signer=signer)
    for op in s.ops:
        w.append(op["kind"], op["attrs"], op["data"], op["step"])
        if op["data"] is not None:  # the output: its batch written before the rest
            w.flush()
    w.seal()
    return path


def index_rows(store: Path) -> dict[Path, list[dict[str, Any]]]:
    """Each streams file of the index and its rows."""
    import pyarrow.parquet as pq

    return {p: pq.read_table(p).to_pylist() for p in sorted((store / index_prefix("streams")).rglob("*.parquet"))}


def row_of(store: Path, stream: Path) -> dict[str, Any]:
    (row,) = [r for rows in index_rows(store).values() for r in rows if f"{r['file_blake3']}.aos" == stream.name]
    return row


def edit_rows(store: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite every streams file of the index with ``edit`` applied to each row: what anyone who can
    write the store can do (a row is not signed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for path, rows in index_rows(store).items():
        for row in rows:
            edit(row)
        path.chmod(0o644)
        pq.write_table(pa.Table.from_pylist(rows, schema=stream_schema()), path)


def verdicts(store: Path, **kw: Any) -> tuple[dict[str, str | None], Any]:
    r = run_index_query("SELECT stream_id, verdict FROM streams", str(store), **kw)
    return dict(r.rows), r


class TestForgedRows:
    """A row is not signed: each forgery of the index is caught by the stream's tail, named, and the
    stream verified again, so the query answers what the streams seal."""

    def truth(self, store: Path) -> dict[str, str | None]:
        return dict(run_query("SELECT stream_id, verdict FROM streams", [str(store)]).rows)

    def test_an_edited_verdict(self, store: Path) -> None:
        truth = self.truth(store)
        assert {"fail", "pass", None} == set(truth.values())
        edit_rows(store, lambda row: row.update(verdict="pass") if row["verdict"] == "fail" else None)
        got, r = verdicts(store)
        assert truth == got
        assert 2 == len(r.reverified) == len(r.mismatched)
        for m in r.mismatched:
            assert m.refusal.startswith("index-row: ")
            assert "the row's verdict is 'pass', the stream seals 'fail'" in (m.refusal)

    def test_worker_processes_check_the_tails(self, store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Many rows are checked by worker processes (as many streams are verified): a forged row's refusal
        comes back from its worker, named, and the rows that pass are trusted as in this process."""
        import observe.query.sources

        truth = self.truth(store)
        edit_rows(store, lambda row: row.update(verdict="pass") if row["verdict"] == "fail" else None)
        monkeypatch.setattr(observe.query.sources, "worker_count", lambda streams: 2)
        got, r = verdicts(store)
        assert truth == got
        assert 2 == len(r.reverified) == len(r.mismatched)
        assert all("the row's verdict is 'pass', the stream seals 'fail'" in m.refusal for m in r.mismatched)
        assert all(m.refusal.startswith("index-row: ") for m in r.mismatched)

    @pytest.mark.parametrize("column", ["gate", "scope", "checks", "checks_failed", "verdict_seq", "key_id"])
    def test_other_sealed_columns_edited(self, store: Path, column: str) -> None:
        truth = self.truth(store)
        forged = {"checks": 7, "checks_failed": 7, "verdict_seq": 1}.get(column, "forged")
        edit_rows(store, lambda row: row.update({column: forged}))
        got, r = verdicts(store)
        assert truth == got
        assert len(r.mismatched) >= 3
        assert all(m.refusal.startswith("index-row: ") for m in r.mismatched)
        assert any(f"the row's {column} is " in m.refusal for m in r.mismatched)

    def test_a_hidden_verdict_row_names_none(self, store: Path) -> None:
        """A row that says no verdict where the stream seals one, pointing at the verdict's batch: caught."""
        truth = self.truth(store)
        edit_rows(store, lambda row: row.update(verdict=None, gate=None, scope=None, verdict_seq=None, checks=0))
        got, r = verdicts(store)
        assert truth == got
        assert 3 == len(r.mismatched)
        assert all(m.refusal.startswith("index-row: ") for m in r.mismatched)

    def test_a_row_swapped_with_another_streams(self, store: Path) -> None:
        """Stream a's row made of stream c's (all but the file it names): caught at a's tail."""
        truth = self.truth(store)
        rows = {r["verdict"]: r for rows in index_rows(store).values() for r in rows}
        passing, failing = rows["pass"], rows["fail"]

        def swap(row: dict[str, Any]) -> None:
            if row["file_blake3"] == passing["file_blake3"]:
                row.update({k: v for k, v in failing.items() if k not in ("file_blake3", "file_size", "url")})

        edit_rows(store, swap)
        got, r = verdicts(store)
        assert truth == got
        ((m,),) = [r.mismatched]
        assert m.path.endswith(f"{passing['file_blake3']}.aos")
        assert m.refusal.split(":")[0] in ("index-row", "stream-chain", "stream-seal")

    def test_only_the_verdict_columns_swapped(self, store: Path) -> None:
        """The sealed columns of another stream (id, head, verdict), the tail columns left: index-row."""
        truth = self.truth(store)
        rows = {r["verdict"]: r for rows in index_rows(store).values() for r in rows}
        passing, failing = rows["pass"], rows["fail"]
        columns = ("stream_id", "head", "events", "gate", "verdict", "scope", "checks", "checks_failed")

        def swap(row: dict[str, Any]) -> None:
            if row["file_blake3"] == passing["file_blake3"]:
                row.update({k: failing[k] for k in columns})

        edit_rows(store, swap)
        got, r = verdicts(store)
        assert truth == got
        ((m,),) = [r.mismatched]
        assert m.refusal.startswith("index-row: ")
        assert "the row's stream_id is" in m.refusal

    def test_a_file_replaced_by_a_stream_of_the_same_size(self, store: Path, tmp_path: Path) -> None:
        """b (failed) replaced by a valid stream of its size that seals pass: the row's tail no longer
        chains; verified again, it is not the bytes its name says (stream-digest); never counted as pass."""
        (b,) = [
            p for p in stored(store) if (row_of(store, p)["gate"], row_of(store, p)["verdict"]) == ("exit-zero", "fail")
        ]
        # Sizes are padded to 8 bytes and vary with how the times compress: a longer step name
        # reaches each larger size, a few tries at each cover the variation.
        for name in (f"build{'-' * pad}" for pad in range(64) for _ in range(8)):
            (tmp_path / "forged.aos").unlink(missing_ok=True)
            forged = lane_stream(tmp_path / "forged.aos", gate="exit-zero", steps={name: 9})
            if forged.stat().st_size == b.stat().st_size:
                break
        else:
            pytest.fail("no stream of the same size could be written")
        b.chmod(0o644)
        shutil.copyfile(forged, b)
        got, r = verdicts(store)
        assert "pass" not in [got.get(row_of(store, b)["stream_id"])]
        ((m,),) = [r.mismatched]
        assert (str(b), True) == (m.path, m.refusal.split(":")[0] in ("stream-chain", "index-row"))
        assert [f"{b}: stream-digest"] == [f"{s.path}: {s.refusal.split(':')[0]}" for s in r.skipped]
        assert [str(b)] == r.reverified

    def test_a_tail_byte_changed(self, store: Path) -> None:
        """Same size, a byte of the verdict's batch changed: the tail check refuses it, the full one too."""
        changed = stored(store)[0]
        changed.chmod(0o644)
        flip_byte(changed, row_of(store, changed)["tail_offset"] + 40)
        got, r = verdicts(store)
        assert 3 == len(got)
        assert [str(changed)] == [m.path for m in r.mismatched] == r.reverified == [s.path for s in r.skipped]
        assert r.mismatched[0].refusal.startswith("stream-")

    def test_a_row_for_a_stream_that_is_not_there(self, store: Path) -> None:
        """A row added for a file the store does not hold: skipped, stream-missing."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        (first, rows), *_ = index_rows(store).items()
        ghost = dict(rows[0], file_blake3="f" * 64, stream_id="e" * 32)
        pq.write_table(
            pa.Table.from_pylist([ghost], schema=stream_schema()), first.with_name("1-00000000000000ff.parquet")
        )
        got, r = verdicts(store)
        assert "e" * 32 not in got
        assert 4 == len(got)
        assert [str(store / f"{'f' * 64}.aos")] == [s.path for s in r.skipped]
        assert r.skipped[0].refusal.startswith("stream-missing: ")

    def test_a_prefix_forged_under_a_signed_tail(self, tmp_path: Path) -> None:
        """A signed stream's bytes before its tail replaced (another stream's batch of the same length, which
        decodes), stored under the new digest with the row edited to name it: the tail still checks under
        the key, so streams answer the sealed verdict, but reading the events is refused: the bytes before
        the seal are not those the signed seal names."""
        from aos.signing import generate_keypair, load_public_key, load_signer

        key, pub = generate_keypair(tmp_path / "k")
        a = two_batch_stream(tmp_path / "a.aos", seed=1, signer=load_signer(key))
        b = two_batch_stream(tmp_path / "b.aos", seed=2, signer=load_signer(key))
        store = tmp_path / "store"
        push(a, store)
        (row,) = [r for rows in index_rows(store).values() for r in rows]
        with StreamFile(a) as f:
            first = f.schema_end
        with StreamFile(b) as f:
            assert first == f.schema_end
        tail = row["tail_offset"]
        data_a, data_b = a.read_bytes(), b.read_bytes()
        with StreamFile(b) as f:
            assert tail in [raw.end for raw in f.batches()]  # b's first batch has the length of a's
        forged = data_a[:first] + data_b[first:tail] + data_a[tail:]
        assert len(forged) == len(data_a)
        assert forged != data_a
        digest = blake3(forged).hexdigest()
        (store / f"{digest}.aos").write_bytes(forged)
        (store / f"{row['file_blake3']}.aos").unlink()
        edit_rows(store, lambda r: r.update(file_blake3=digest))
        got = run_index_query("SELECT verdict FROM streams", str(store), key=load_public_key(pub))
        assert ([("pass",)], [], []) == (got.rows, got.reverified, got.mismatched)
        stopped = refused(run_index_query, "SELECT count(*) FROM events", str(store), key=load_public_key(pub))
        assert "stream-seal" == stopped.name
        assert "not the ones it seals" in stopped.detail

    def test_with_a_key_the_seal_signature_is_checked_from_the_tail(self, tmp_path: Path) -> None:
        """Signed streams, queried with --key: no stream verified again, the signature checked at the tail;
        another key's stream is refused (stream-signature) and verified again."""
        from aos.signing import generate_keypair, load_public_key, load_signer

        key, pub = generate_keypair(tmp_path / "k")
        other, _ = generate_keypair(tmp_path / "o")
        out = tmp_path / "store"
        for name, signer in (("a", key), ("b", key), ("c", other)):
            s = SyntheticStream(gate="exit-zero")
            s.exit(0)
            s.add("verdict", {"gate": "exit-zero", "verdict": "pass", "scope": "command", "checks": []})
            s.write(tmp_path / f"{name}.aos", signer=load_signer(signer))
            push(tmp_path / f"{name}.aos", out)
        got, r = verdicts(out, key=load_public_key(pub))
        assert 2 == len(got)
        assert 1 == len(r.mismatched) == len(r.reverified)
        assert r.mismatched[0].refusal.startswith("stream-signature: ")
        assert r.skipped[0].refusal.startswith("stream-signature: ")


class TestMemo:
    """The rows this user checked (or pushed) are not read again while their files stay the same files."""

    def memo(self, store: Path) -> Path:
        from observe.query.checked import Memo

        return Memo(store).path

    def test_push_leaves_the_memo_and_a_query_checks_nothing_again(self, store: Path) -> None:
        memo = self.memo(store)
        before = (memo.read_bytes(), memo.stat().st_mtime_ns)
        assert 4 == len(json.loads(before[0]))
        r = run_index_query("SELECT count(*) FROM streams", str(store))
        assert ([(4,)], [], []) == (r.rows, r.reverified, r.mismatched)
        assert before == (memo.read_bytes(), memo.stat().st_mtime_ns)

    def test_a_file_touched_is_checked_again(self, store: Path) -> None:
        """A chmod changes no byte, but the file's change time: its row is checked against its tail again."""
        stored(store)[0].chmod(0o600)
        r = run_index_query("SELECT count(*) FROM streams", str(store))
        assert ([(4,)], [], []) == (r.rows, r.reverified, r.mismatched)
        assert 5 == len(json.loads(self.memo(store).read_bytes()))

    def test_another_users_machine_checks_every_tail(self, store: Path, tmp_path: Path, monkeypatch: Any) -> None:
        """No memo (another machine): every row checked against its tail, none verified again, the same answer."""
        monkeypatch.setenv("ALPHA_CACHE", str(tmp_path / "elsewhere"))
        for sql in TABLES.values():
            r = run_index_query(sql, str(store))
            assert ([], []) == (r.reverified, r.mismatched)
            assert run_query(sql, [str(p) for p in stored(store)]).rows == r.rows
        assert 4 == len(json.loads(self.memo(store).read_bytes()))

    def test_a_damaged_memo_is_an_empty_one(self, store: Path) -> None:
        self.memo(store).write_bytes(b"{not json")
        r = run_index_query("SELECT count(*) FROM streams", str(store))
        assert ([(4,)], [], []) == (r.rows, r.reverified, r.mismatched)
        assert 4 == len(json.loads(self.memo(store).read_bytes()))

    def test_a_memo_entry_is_not_a_row_edited(self, store: Path) -> None:
        """The memo holds the fingerprint of the row checked: an edited row misses it and is caught."""
        edit_rows(store, lambda row: row.update(verdict="pass"))
        r = run_index_query("SELECT count(*) FROM streams WHERE verdict = 'pass'", str(store))
        assert [(1,)] == r.rows
        assert 3 == len(r.mismatched)


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


class TestS3Store:
    """``--store s3://...``: the index read from the bucket, its streams copied into the user's mirror, each kept
    only when its bytes hash to its name, then every check of a folder store run on the copies."""

    @pytest.fixture
    def pushed(self, s3_bucket: S3Bucket, store: Path) -> S3Bucket:
        """The folder store's four streams pushed to a new bucket, as a CI job pushes them."""
        for path in stored(store):
            push(path, s3_bucket.url)
        return s3_bucket

    SQL = "SELECT verdict, count(*) AS n FROM streams GROUP BY verdict ORDER BY verdict"

    def test_it_answers_as_the_folder_store(self, pushed: S3Bucket, store: Path) -> None:
        from observe.query.mirror import mirror_folder

        here = run_index_query(self.SQL, str(store))
        there = run_index_query(self.SQL, pushed.url)
        assert here.rows == there.rows
        assert ([], [], []) == (there.skipped, there.reverified, there.mismatched)
        copies = sorted(mirror_folder(open_store(pushed.url)).glob("*.aos"))
        assert [p.name for p in stored(store)] == [p.name for p in copies]
        events = "SELECT count(*) FROM events"
        assert run_index_query(events, str(store)).rows == run_index_query(events, pushed.url).rows

    def test_a_second_query_downloads_nothing(self, pushed: S3Bucket) -> None:
        """Copies already there are not fetched again: the bucket's objects can even be gone."""
        first = run_index_query(self.SQL, pushed.url)
        for path in stored_names(pushed):
            pushed.client.delete_object(Bucket=pushed.name, Key=path)
        again = run_index_query(self.SQL, pushed.url)
        assert (first.rows, []) == (again.rows, again.skipped)

    def test_an_object_that_is_not_its_name_is_not_kept(self, pushed: S3Bucket, tmp_path: Path) -> None:
        """Forgery: a bucket object replaced by another valid stream (under the first one's name) is skipped as
        stream-digest, and no copy of it is left in the mirror."""
        from observe.query.mirror import mirror_folder

        names = stored_names(pushed)
        other = lane_stream(tmp_path / "other.aos", gate="exit-zero", steps={"x": 1})
        pushed.client.put_object(Bucket=pushed.name, Key=names[0], Body=other.read_bytes())
        r = run_index_query("SELECT count(*) FROM streams", pushed.url)
        assert [(3,)] == r.rows
        assert [s.refusal.split(":")[0] for s in r.skipped] == ["stream-digest"]
        assert not (mirror_folder(open_store(pushed.url)) / names[0]).exists()
        assert [] == [p.name for p in mirror_folder(open_store(pushed.url)).glob(".part-*")]

    def test_a_copy_edited_in_the_mirror_is_caught(self, pushed: S3Bucket) -> None:
        """Forgery: whoever writes the user's cache flips a byte of a copy's tail; its row is not trusted, the
        copy is verified again and skipped (as an edited file of a folder store is)."""
        from observe.query.mirror import mirror_folder

        run_index_query(self.SQL, pushed.url)
        copy = sorted(mirror_folder(open_store(pushed.url)).glob("*.aos"))[0]
        flip_byte(copy, copy.stat().st_size - 40)
        r = run_index_query("SELECT count(*) FROM streams", pushed.url)
        assert [(3,)] == r.rows
        assert (1, 1) == (len(r.mismatched), len(r.skipped))

    def test_the_command(self, pushed: S3Bucket) -> None:
        r = alpha_invoke("observe", "query", self.SQL, "--store", pushed.url, "--json")
        assert 0 == r.exit_code, r.stderr
        doc = json.loads(r.stdout)
        assert ([], []) == (doc["skipped"], doc["reverified"])
        assert 4 == sum(n for _, n in doc["rows"])

    def test_an_unreachable_bucket_is_refused(self, s3_bucket: S3Bucket) -> None:
        r = alpha_invoke("observe", "query", "SELECT 1", "--store", s3_bucket.url + "-no-such-bucket")
        assert (1, True) == (r.exit_code, r.stderr.startswith("refused: store-unreachable: ")), r.stderr


def stored_names(bucket: S3Bucket) -> list[str]:
    """The keys of the bucket's stream objects (not its index)."""
    listed = bucket.client.list_objects_v2(Bucket=bucket.name).get("Contents", [])
    return sorted(str(o["Key"]) for o in listed if str(o["Key"]).endswith(".aos"))
