"""``alpha observe query``: SQL (DuckDB) over the verified events of many streams."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aos.refusals import StreamSeal, refusal_by_name
from aos.writer import StreamWriter
from gates.testing import SyntheticStream
from observe.query.run import (
    CHECK_COLUMNS,
    EVENT_COLUMNS,
    STREAM_COLUMNS,
    expand_paths,
    open_sources,
    query_sources,
    run_query,
)
from observe.refusals import QuerySQL
from tests.helpers.cli import invoke as alpha_invoke
from tests.helpers.paths import DOCS

pytest.importorskip("duckdb")

QUERY_DOC = DOCS / "QUERY.md"
DAY_NS = 86_400 * 10**9


def invoke(*args: str) -> tuple[int, str, str]:
    r = alpha_invoke("observe", "query", *args)
    return r.exit_code, r.stdout, r.stderr


def lane_stream(
    path: Path,
    *,
    gate: str = "exit-zero",
    exit_code: int = 0,
    checks: dict[str, str] | None = None,
    steps: dict[str, int] | None = None,
    receipt_status: str = "pass",
    verdict: bool = True,
) -> Path:
    """A sealed stream: steps with durations, a receipt, an exit and (unless told) a verdict with ``checks``."""
    s = SyntheticStream(gate=gate)
    for name, duration in (steps or {"build": 5, "test": 7}).items():
        s.step_start(name)
        s.output("stdout", f"{name} ok\n".encode(), name)
        s.step_end(name, exit_code=0)["attrs"]["duration_ns"] = duration
    s.receipt("unit-tests", receipt_status, passed=3)
    s.exit(exit_code)
    if verdict:
        checks = checks or {"exit-code": "pass" if exit_code == 0 else "fail"}
        overall = "pass" if all(v == "pass" for v in checks.values()) else "fail"
        s.add(
            "verdict",
            {
                "gate": gate,
                "verdict": overall,
                "scope": "command",
                "checks": [{"name": n, "status": st, "reason": "r", "evidence": [2]} for n, st in checks.items()],
            },
        )
    s.write(path)
    return path


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    """Four sealed streams in a folder: two lanes, failing checks, steps of known durations."""
    d = tmp_path / "streams"
    d.mkdir()
    lane_stream(d / "a.aos", gate="exit-zero", steps={"build": 5, "test": 70})
    lane_stream(d / "b.aos", gate="exit-zero", exit_code=2, steps={"build": 9})
    lane_stream(
        d / "c.aos",
        gate="distributed-device",
        checks={"static-build": "fail", "preflight": "fail", "exit-code": "pass"},
        steps={"build": 300},
        receipt_status="fail",
    )
    lane_stream(d / "d.aos", gate="distributed-device", checks={"static-build": "fail"}, steps={"build": 40})
    return d


class TestTables:
    def test_columns_are_the_documented_ones(self, fleet: Path) -> None:
        """events, streams and checks have exactly the columns observe.query.run (and docs/QUERY.md) name."""
        for table, cols in (("events", EVENT_COLUMNS), ("streams", STREAM_COLUMNS), ("checks", CHECK_COLUMNS)):
            assert list(cols) == run_query(f"SELECT * FROM {table} LIMIT 0", [str(fleet)]).columns
        doc = QUERY_DOC.read_text(encoding="utf-8")
        for col in {*EVENT_COLUMNS, *STREAM_COLUMNS, *CHECK_COLUMNS}:
            assert f"| `{col}` |" in doc, col

    def test_all_events_of_all_streams_in_one_table(self, fleet: Path) -> None:
        """events holds every event of every stream, each with its stream's id."""
        r = run_query("SELECT stream_id, count(*) FROM events GROUP BY stream_id", [str(fleet)])
        counts = dict(r.rows)
        s = run_query("SELECT stream_id, events FROM streams", [str(fleet)])
        assert dict(s.rows) == counts
        assert 4 == len(counts)

    def test_verdict_columns_are_joined_onto_every_row(self, fleet: Path) -> None:
        """Every event carries its stream's sealed verdict's gate, verdict and scope."""
        r = run_query(
            "SELECT DISTINCT e.stream_id, e.gate, e.verdict, e.scope, s.gate, s.verdict, s.scope "
            "FROM events e JOIN streams s USING (stream_id)",
            [str(fleet)],
        )
        assert 4 == len(r.rows)
        for _sid, g, v, sc, sg, sv, ss in r.rows:
            assert (g, v, sc) == (sg, sv, ss)
            assert v in ("pass", "fail")
        gates = sorted(row[1] for row in r.rows)
        assert ["distributed-device", "distributed-device", "exit-zero", "exit-zero"] == gates

    def test_no_verdict_is_null(self, tmp_path: Path) -> None:
        """A sealed stream without a verdict joins with null verdict columns."""
        lane_stream(tmp_path / "n.aos", verdict=False)
        r = run_query("SELECT DISTINCT gate, verdict, scope FROM events", [str(tmp_path)])
        assert [(None, None, None)] == r.rows

    def test_typed_columns(self, fleet: Path) -> None:
        """name, status, exit_code and duration_ns come from attrs; attrs itself answers DuckDB's JSON operators."""
        r = run_query(
            "SELECT name, exit_code, duration_ns, CAST(attrs->>'$.exit_code' AS BIGINT), "
            "CAST(attrs->>'$.duration_ns' AS BIGINT) FROM events WHERE kind = 'step.end' ORDER BY duration_ns",
            [str(fleet)],
        )
        assert [5, 9, 40, 70, 300] == [row[2] for row in r.rows]
        for _name, code, dur, code2, dur2 in r.rows:
            assert (code, dur) == (code2, dur2)
        r = run_query("SELECT name, status FROM events WHERE kind = 'receipt' ORDER BY status", [str(fleet)])
        assert [("unit-tests", "fail")] + [("unit-tests", "pass")] * 3 == r.rows
        r = run_query("SELECT exit_code FROM events WHERE kind = 'process.exit' ORDER BY 1", [str(fleet)])
        assert [(0,), (0,), (0,), (2,)] == r.rows

    def test_streams_table(self, tmp_path: Path, asset: Callable[[str], Path]) -> None:
        """streams: one row per stream with its path, integrity, seal, signer and time range."""
        shutil.copy(asset("good-signed.aos"), tmp_path / "signed.aos")
        lane_stream(tmp_path / "plain.aos")
        r = run_query(
            "SELECT path, integrity, sealed, signed, key_id, first_time <= last_time, events "
            "FROM streams ORDER BY path",
            [str(tmp_path)],
        )
        plain, signed = r.rows
        assert (str(tmp_path / "plain.aos"), "intact", True, False, None, True) == plain[:6]
        assert (str(tmp_path / "signed.aos"), "intact", True, True) == signed[:4]
        assert re.fullmatch(r"[0-9a-f]{32}", signed[4])

    def test_checks_table(self, fleet: Path) -> None:
        """checks: one row per check of each sealed verdict."""
        r = run_query("SELECT name, status FROM checks ORDER BY name, status", [str(fleet)])
        assert 6 == len(r.rows)
        assert ("preflight", "fail") in r.rows


class TestDocumentedExamples:
    def examples(self) -> list[str]:
        return re.findall(r"```sql\n(.*?)```", QUERY_DOC.read_text(encoding="utf-8"), re.S)

    def test_every_sql_example_in_the_docs_runs(self, fleet: Path) -> None:
        """Each ```sql block of docs/QUERY.md runs over a fleet of streams."""
        found = self.examples()
        assert len(found) >= 5
        for sql in found:
            run_query(sql, [str(fleet)])

    def test_checks_failed_most_this_week(self, fleet: Path, tmp_path: Path) -> None:
        """The worked example counts failing checks of this week's streams, most first."""
        old = SyntheticStream(gate="distributed-device")
        old.add(
            "verdict", {"gate": "g", "verdict": "fail", "scope": "s", "checks": [{"name": "old", "status": "fail"}]}
        )
        w = StreamWriter(fleet / "old.aos", background_flush=False, clock=lambda: (1_000_000, 0))
        for op in old.ops:
            w.append(op["kind"], op["attrs"], op["data"], op["step"])
        w.seal()
        sql = next(s for s in self.examples() if "AS failed" in s)
        assert [("static-build", 2), ("exit-code", 1), ("preflight", 1)] == run_query(sql, [str(fleet)]).rows

    def test_max_step_duration_per_lane(self, fleet: Path) -> None:
        """The worked example gives each lane's longest step."""
        sql = next(s for s in self.examples() if "arg_max" in s)
        rows = run_query(sql, [str(fleet)]).rows
        assert [("distributed-device", "build", 300), ("exit-zero", "test", 70)] == [r[:3] for r in rows]


class TestSkipped:
    def bad_assets(self, manifest: dict[str, dict[str, Any]], with_key: bool) -> dict[str, str]:
        return {
            name: entry["refusal"]
            for name, entry in manifest.items()
            if entry["refusal"] is not None and ("key" in entry) == with_key
        }

    @pytest.mark.parametrize("with_key", [False, True], ids=["no-key", "signer-key"])
    def test_every_known_bad_stream_is_skipped_with_its_refusal(
        self, asset: Callable[[str], Path], asset_manifest: dict[str, dict[str, Any]], with_key: bool
    ) -> None:
        """Each stream of tests/assets that verify refuses is skipped, named with that refusal; good ones join."""
        bad = self.bad_assets(asset_manifest, with_key)
        good = "good-signed.aos" if with_key else "good.aos"
        args = [str(asset(n)) for n in [*bad, good]]
        if with_key:
            args += ["--key", str(asset("signer.pub"))]
        code, out, _ = invoke("SELECT count(*) AS n, count(DISTINCT stream_id) AS s FROM events", *args, "--json")
        assert 0 == code
        doc = json.loads(out)
        skipped = {Path(s["path"]).name: s["refusal"].split(":")[0] for s in doc["skipped"]}
        assert bad == skipped
        assert 1 == doc["rows"][0][1]

    def test_include_damaged_keeps_what_reads(self, tmp_path: Path, asset: Callable[[str], Path]) -> None:
        """--include-damaged adds the events before the damage, marked by integrity, with no verdict."""
        shutil.copy(asset("unsealed.aos"), tmp_path / "u.aos")
        lane_stream(tmp_path / "ok.aos")
        code, out, err = invoke("SELECT integrity, events, verdict FROM streams ORDER BY integrity", str(tmp_path))
        assert (0, ["intact"]) == (code, [line.split()[0] for line in out.splitlines()[2:]])
        assert f"skipped {tmp_path / 'u.aos'}: stream-unsealed: no seal; last intact seq 16" in err
        code, out, err = invoke(
            "SELECT integrity, events, verdict FROM streams ORDER BY integrity",
            str(tmp_path),
            "--include-damaged",
            "--json",
        )
        doc = json.loads(out)
        assert (0, []) == (code, doc["skipped"])
        assert ["intact", 12, "pass"] == doc["rows"][0]
        assert ["stream-unsealed", 17, None] == doc["rows"][1]
        r = run_query("SELECT count(*) FROM events WHERE verdict IS NULL", [str(tmp_path)], include_damaged=True)
        assert [(17,)] == r.rows

    def test_include_damaged_truncated(self, tmp_path: Path, asset: Callable[[str], Path]) -> None:
        """A cut stream joins up to its last intact seq; a file that is no stream at all stays skipped."""
        shutil.copy(asset("truncated-mid-batch.aos"), tmp_path / "t.aos")
        shutil.copy(asset("not-arrow.aos"), tmp_path / "x.aos")
        r = run_query(
            "SELECT max(seq), any_value(integrity) FROM events JOIN streams USING (stream_id)",
            [str(tmp_path)],
            include_damaged=True,
        )
        assert [(7, "stream-truncated")] == r.rows
        assert ["stream-schema"] == [s.refusal.split(":")[0] for s in r.skipped]

    def test_missing_and_unmatched_patterns_are_skipped(self, fleet: Path, tmp_path: Path) -> None:
        """A path that does not exist and a glob that matches nothing are named as stream-missing."""
        r = run_query("SELECT count(*) FROM streams", [str(fleet / "*.aos"), str(tmp_path / "no.aos"), "zz*/*.aos"])
        assert [(4,)] == r.rows
        assert ["stream-missing", "stream-missing"] == [s.refusal.split(":")[0] for s in r.skipped]

    def test_a_fifo_is_refused_not_waited_on(self, tmp_path: Path) -> None:
        """A FIFO named as a stream is skipped at once (stream-missing), never read."""
        import os

        os.mkfifo(tmp_path / "f.aos")
        r = run_query("SELECT count(*) FROM streams", [str(tmp_path / "f.aos")])
        assert ["stream-missing"] == [s.refusal.split(":")[0] for s in r.skipped]


class TestParallelVerification:
    def test_workers_give_what_one_process_gives(self, tmp_path: Path, asset: Callable[[str], Path]) -> None:
        """Verifying in worker processes joins and skips exactly what verifying in-process does, in order."""
        for i in range(5):
            lane_stream(tmp_path / f"s{i}.aos")
        shutil.copy(asset("good-signed.aos"), tmp_path / "signed.aos")
        shutil.copy(asset("unsealed.aos"), tmp_path / "u.aos")
        (tmp_path / "junk.aos").write_bytes(b"junk")
        paths, _ = expand_paths([str(tmp_path)])
        from aos.signing import load_public_key

        for key in (None, load_public_key(asset("signer.pub"))):
            for damaged in (False, True):
                serial = open_sources(paths, include_damaged=damaged, key=key, jobs=1)
                pooled = open_sources(paths, include_damaged=damaged, key=key, jobs=2)
                assert all(s.batches is None for s in pooled[0])  # workers keep none: the scan re-reads
                for s in serial[0]:
                    s.batches = None
                assert serial == pooled


class TestGlobs:
    def test_glob_folder_and_file_name_each_stream_once(self, fleet: Path) -> None:
        """A folder, a glob and a file that overlap still count each stream once."""
        paths, skipped = expand_paths([str(fleet), str(fleet / "*.aos"), str(fleet / "a.aos")])
        assert ([], 4) == (skipped, len(paths))
        r = run_query("SELECT count(*) FROM streams", [str(fleet / "[ab].aos"), str(fleet / "a.aos")])
        assert [(2,)] == r.rows

    def test_recursive_glob(self, fleet: Path) -> None:
        """``**`` globs recurse; a folder argument takes its *.aos recursively."""
        sub = fleet / "deep" / "er"
        sub.mkdir(parents=True)
        lane_stream(sub / "e.aos")
        assert [(5,)] == run_query("SELECT count(*) FROM streams", [str(fleet / "**" / "*.aos")]).rows
        assert [(5,)] == run_query("SELECT count(*) FROM streams", [str(fleet)]).rows


class TestOutput:
    def test_table(self, fleet: Path) -> None:
        """The default output is an aligned table: header, rule, rows; numbers right-aligned."""
        code, out, _ = invoke("SELECT gate, count(*) AS n FROM streams GROUP BY gate ORDER BY gate", str(fleet))
        assert 0 == code
        assert [
            "gate                n",
            "------------------  -",
            "distributed-device  2",
            "exit-zero           2",
        ] == (out.splitlines())

    def test_json(self, fleet: Path) -> None:
        """--json is one document: columns, rows and skipped."""
        code, out, _ = invoke("SELECT name, status FROM checks ORDER BY 1, 2 LIMIT 1", str(fleet), "--json")
        assert (0, {"columns": ["name", "status"], "rows": [["exit-code", "fail"]], "skipped": []}) == (
            code,
            json.loads(out),
        )

    def test_json_bytes_and_times(self, fleet: Path) -> None:
        """--json writes bytes as {"bytes_b64": B} and times as ISO 8601."""
        code, out, _ = invoke(
            "SELECT data, time FROM events WHERE kind = 'stdout' ORDER BY data LIMIT 1", str(fleet), "--json"
        )
        assert 0 == code
        row = json.loads(out)["rows"][0]
        assert {"bytes_b64": "YnVpbGQgb2sK"} == row[0]  # "build ok\n"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+\+00:00", row[1])

    def test_csv(self, fleet: Path) -> None:
        """--csv writes a header and one line a row; skipped streams go to stderr."""
        (fleet / "junk.aos").write_bytes(b"junk")
        code, out, err = invoke(
            "SELECT gate, count(*) AS n FROM streams GROUP BY gate ORDER BY gate", str(fleet), "--csv"
        )
        assert 0 == code
        assert [["gate", "n"], ["distributed-device", "2"], ["exit-zero", "2"]] == list(csv.reader(io.StringIO(out)))
        assert "skipped" in err
        assert "junk.aos: stream-" in err

    def test_terminal_escapes_from_a_stream_are_not_sent_to_the_terminal(self, tmp_path: Path) -> None:
        """A stream's own control characters print as \\xNN in the table (no ANSI injection)."""
        s = SyntheticStream()
        s.output("stdout", b"\x1b]0;owned\x07\x1b[2Jplain")
        s.exit(0)
        s.write(tmp_path / "esc.aos")
        code, out, _ = invoke("SELECT data FROM events WHERE kind = 'stdout'", str(tmp_path))
        assert 0 == code
        assert "\x1b" not in out
        assert "\\x1b]0;owned\\x07\\x1b[2Jplain" in out


class TestRefusals:
    @pytest.mark.parametrize(
        "sql",
        ["SELEC 1", "SELECT nope FROM events", "SELECT * FROM no_such_table", "SELECT CAST('x' AS INT)"],
        ids=["syntax", "column", "table", "runtime"],
    )
    def test_sql_duckdb_refuses_is_query_sql_exit_2(self, fleet: Path, sql: str) -> None:
        """SQL that DuckDB does not accept is refused as query-sql, exit 2 (usage), no traceback."""
        code, out, err = invoke(sql, str(fleet))
        assert (2, "") == (code, out)
        assert err.startswith("refused: query-sql: ")
        assert "Traceback" not in err
        assert "query-sql" == refusal_by_name("query-sql").name

    def test_scanning_events_twice_says_how(self, fleet: Path) -> None:
        """A self-join of events (a reader scans once) is refused with the CTE that does it."""
        with pytest.raises(QuerySQL, match="MATERIALIZED"):
            run_query("SELECT count(*) FROM events a, events b WHERE a.seq = b.seq", [str(fleet)])
        r = run_query(
            "WITH e AS MATERIALIZED (SELECT stream_id, seq FROM events) "
            "SELECT count(*) FROM e a JOIN e b USING (stream_id, seq)",
            [str(fleet)],
        )
        assert run_query("SELECT count(*) FROM events", [str(fleet)]).rows == r.rows

    def test_without_duckdb_it_says_how_to_install_it(self, fleet: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A plain `pip install .` has no DuckDB: query-sql, exit 2, naming the extra (never a traceback)."""
        import sys

        monkeypatch.setitem(sys.modules, "duckdb", None)  # import duckdb raises ImportError
        code, out, err = invoke("SELECT 1", str(fleet))
        assert (2, "") == (code, out)
        assert err.startswith("refused: query-sql: ")
        from observe.util.install import install_hint

        assert install_hint("query") in err
        assert "Traceback" not in err

    def test_no_streams_is_usage(self) -> None:
        """SQL with no stream is a usage error (exit 2)."""
        assert 2 == invoke("SELECT 1")[0]

    def test_a_stream_changed_after_verification_stops_the_query(
        self, fleet: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Bytes that change between verification and the scan (of a stream too big to keep) stop it: stream-seal."""
        monkeypatch.setattr("observe.query.sources.SMALL_STREAM", 0)
        paths, _ = expand_paths([str(fleet)])
        sources, _ = open_sources(paths)
        lane_stream(fleet / "other.aos", steps={"build": 1})
        (fleet / "other.aos").replace(fleet / "b.aos")  # same path, other (valid, sealed) bytes
        with pytest.raises(StreamSeal, match="changed after it was verified"):
            query_sources("SELECT count(*) FROM events", sources)

    def test_a_small_stream_is_queried_as_verified(self, fleet: Path) -> None:
        """A small stream's batches are decoded from the very bytes verified: a later edit is not seen."""
        paths, _ = expand_paths([str(fleet)])
        sources, _ = open_sources(paths)
        before = run_query("SELECT count(*) FROM events", [str(fleet)]).rows
        lane_stream(fleet / "other.aos", steps={"build": 1, "a": 1, "b": 1})
        (fleet / "other.aos").replace(fleet / "b.aos")
        assert before == query_sources("SELECT count(*) FROM events", sources)[1]

    @pytest.mark.parametrize(
        ("small", "budget", "kept"), [(0, 1 << 30, 0), (1 << 20, 0, 0), (1 << 20, 6000, 2), (1 << 20, 1 << 30, 4)]
    )
    def test_kept_or_re_read_the_rows_are_the_same(
        self, fleet: Path, monkeypatch: pytest.MonkeyPatch, small: int, budget: int, kept: int
    ) -> None:
        """Streams decoded during verification, re-read by the scan, or some of each, give the same rows."""
        sql = "SELECT stream_id, seq, kind, name, exit_code, gate, data FROM events ORDER BY stream_id, seq"
        expected = run_query(sql, [str(fleet)]).rows
        monkeypatch.setattr("observe.query.sources.SMALL_STREAM", small)
        monkeypatch.setattr("observe.query.sources.CACHE_BUDGET", budget)
        paths, _ = expand_paths([str(fleet)])
        sources, _ = open_sources(paths)
        assert kept == sum(s.batches is not None for s in sources)  # each fleet stream keeps about 3 KB
        assert expected == query_sources(sql, sources)[1]


class TestReadOnly:
    def test_settings_are_locked_off(self, fleet: Path) -> None:
        """External access, extension autoloading and the progress bar (it would draw on stdout) are off."""
        names = ("enable_external_access", "autoload_known_extensions", "enable_progress_bar", "lock_configuration")
        sql = "SELECT " + ", ".join(f"current_setting('{n}')" for n in names)
        assert [(False, False, False, True)] == run_query(sql, [str(fleet)]).rows

    @pytest.mark.parametrize(
        "sql",
        [
            "COPY (SELECT * FROM streams) TO '{out}'",
            "COPY (SELECT 1) TO '{out}' (FORMAT parquet)",
            "SELECT * FROM read_csv('/etc/passwd')",
            "SELECT * FROM read_text('/etc/passwd')",
            "ATTACH '{out}' AS x",
            "EXPORT DATABASE '{dir}'",
            "INSTALL httpfs",
            "SET enable_external_access = true",
        ],
    )
    def test_a_query_cannot_touch_files(self, fleet: Path, tmp_path: Path, sql: str) -> None:
        """COPY TO, read_csv, ATTACH, EXPORT, INSTALL and re-enabling access are refused; nothing is written."""
        out = tmp_path / "out.csv"
        code, _, err = invoke(sql.format(out=out, dir=tmp_path / "exp"), str(fleet))
        assert 2 == code
        assert err.startswith("refused: query-sql: ")
        assert not out.exists()
        assert not (tmp_path / "exp").exists()

    @pytest.mark.parametrize(
        "sql",
        [
            "SELECT content FROM read_text('.tmp/notes.txt')",
            "SELECT * FROM read_csv('.tmp/notes.txt')",
            "COPY (SELECT 'overwritten') TO '.tmp/notes.txt'",
            "COPY (SELECT 1) TO '.tmp/new.csv'",
        ],
    )
    def test_a_query_cannot_touch_the_temp_folder(
        self, fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sql: str
    ) -> None:
        """DuckDB's default temp folder (./.tmp) is neither readable nor writable by a query: there is none."""
        work = tmp_path / "work"
        (work / ".tmp").mkdir(parents=True)
        (work / ".tmp" / "notes.txt").write_text("private notes\n")
        monkeypatch.chdir(work)
        code, out, err = invoke(sql, str(fleet))
        assert (2, "") == (code, out)
        assert err.startswith("refused: query-sql: ")
        assert "private notes\n" == (work / ".tmp" / "notes.txt").read_text()
        assert ["notes.txt"] == sorted(p.name for p in (work / ".tmp").iterdir())

    def test_no_temp_directory_and_no_allowed_paths(self, fleet: Path) -> None:
        """A query runs with no temp directory and no allowed directory or path."""
        names = ("temp_directory", "allowed_directories", "allowed_paths")
        sql = "SELECT " + ", ".join(f"current_setting('{n}')" for n in names)
        assert [("", [], [])] == run_query(sql, [str(fleet)]).rows


class TestUntrustedStreams:
    def test_stream_values_are_data_never_sql(self, tmp_path: Path) -> None:
        """A forged stream whose attrs, step names and labels hold SQL is queried as values; nothing runs."""
        evil = "x'); DROP TABLE streams; COPY (SELECT 1) TO '/tmp/pwned-by-stream.csv'; --"
        s = SyntheticStream(gate=evil)
        s.ops[0]["attrs"]["labels"] = {evil: evil}
        s.step_start(evil)
        s.step_end(evil, exit_code=0)
        s.receipt(evil, "pass", **{evil: evil})
        s.exit(0)
        s.add("verdict", {"gate": evil, "verdict": "pass", "scope": evil, "checks": [{"name": evil, "status": "fail"}]})
        s.write(tmp_path / "it's; DROP.aos")
        lane_stream(tmp_path / "fine.aos")
        r = run_query("SELECT DISTINCT name FROM events WHERE kind IN ('step.end', 'receipt')", [str(tmp_path)])
        assert {("unit-tests",), ("build",), ("test",), (evil,)} == set(r.rows)
        assert [(evil,)] == run_query("SELECT name FROM checks WHERE status = 'fail'", [str(tmp_path)]).rows
        r = run_query("SELECT gate, scope, labels, path FROM streams WHERE gate <> 'exit-zero'", [str(tmp_path)])
        assert [(evil, evil)] == [row[:2] for row in r.rows]
        assert {evil: evil} == json.loads(r.rows[0][2])
        assert str(tmp_path / "it's; DROP.aos") == r.rows[0][3]
        assert [(2,)] == run_query("SELECT count(*) FROM streams", [str(tmp_path)]).rows
        assert not Path("/tmp/pwned-by-stream.csv").exists()

    def test_colliding_stream_ids_are_reported_not_merged(self, tmp_path: Path) -> None:
        """Two files with one stream id and different bytes are both skipped as query-stream-id."""
        first = lane_stream(tmp_path / "real.aos")
        sid = run_query("SELECT stream_id FROM streams", [str(first)]).rows[0][0]
        w = StreamWriter(tmp_path / "forged.aos", stream_id=sid, background_flush=False)
        w.append("stream.open", {"stream_id": sid})
        w.append("verdict", {"gate": "exit-zero", "verdict": "pass", "scope": "physical", "checks": []})
        w.seal()
        lane_stream(tmp_path / "other.aos")
        code, out, _ = invoke("SELECT count(*) AS streams FROM streams", str(tmp_path), "--json")
        doc = json.loads(out)
        assert (0, [[1]]) == (code, doc["rows"])
        assert {"forged.aos", "real.aos"} == {Path(s["path"]).name for s in doc["skipped"]}
        for s in doc["skipped"]:
            assert s["refusal"].startswith(f"query-stream-id: stream id {sid} is also claimed by ")

    def test_an_identical_copy_is_taken_once(self, tmp_path: Path) -> None:
        """A byte-identical copy of a stream joins once; the copy is named as skipped."""
        lane_stream(tmp_path / "a.aos")
        shutil.copy(tmp_path / "a.aos", tmp_path / "b.aos")
        r = run_query("SELECT count(*) FROM streams", [str(tmp_path)])
        assert [(1,)] == r.rows
        assert [("b.aos", "query-stream-id")] == [(Path(s.path).name, s.refusal.split(":")[0]) for s in r.skipped]

    def test_key_admits_only_streams_it_signed(self, tmp_path: Path, asset: Callable[[str], Path]) -> None:
        """With --key, an unsigned stream is skipped as stream-signature; the signed one joins."""
        shutil.copy(asset("good-signed.aos"), tmp_path / "signed.aos")
        lane_stream(tmp_path / "plain.aos")
        code, out, _ = invoke("SELECT path FROM streams", str(tmp_path), "--key", str(asset("signer.pub")), "--json")
        doc = json.loads(out)
        assert (0, [[str(tmp_path / "signed.aos")]]) == (code, doc["rows"])
        assert ["stream-signature"] == [s["refusal"].split(":")[0] for s in doc["skipped"]]
