"""The evidence index: push writes a stream's row (Parquet, by day) beside the streams; readers union the files.

Run against a folder and the suite's real S3-compatible server (``s3_bucket``);
the index is read back by this tool, by DuckDB (offline: no extension is
installed or loaded) and by DataFusion.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from aos.verify import verify_stream
from observe.store import open_store, push
from observe.store_index import CHECK_COLUMNS, STREAM_COLUMNS, describe, index_prefix, read_index
from tests.helpers.paths import ROOT
from tests.helpers.refusals import refused
from tests.helpers.run import alpha
from tests.helpers.s3 import S3Bucket
from tracker.testing import flip_byte, sealed_stream


def index_files(store: Path) -> list[str]:
    """Every file under a folder store's index, relative to it (a temporary ``.part`` would show here)."""
    return sorted(p.relative_to(store).as_posix() for p in (store / "index").rglob("*") if p.is_file())


def streams(tmp_path: Path, n: int, **kw: object) -> list[Path]:
    out = []
    for i in range(n):
        path = tmp_path / f"s{i}.aos"
        sealed_stream(path, stdout=f"run {i}\n".encode(), **kw)  # type: ignore[arg-type]
        out.append(path)
    return out


class TestRows:
    def test_push_writes_the_verified_row(self, tmp_path: Path) -> None:
        """A push appends the row of what it verified: ids, digest, size, head, verdict, checks, devices, times."""
        path = tmp_path / "a.aos"
        sealed_stream(path, devices=["GPU-aaa", "GPU-bbb"], verdict="fail", scope="physical")
        url = push(path, tmp_path / "store")
        v = verify_stream(path)
        rows, checks = read_index(open_store(tmp_path / "store"))
        assert (*STREAM_COLUMNS, "day") == tuple(rows.column_names)
        assert (*CHECK_COLUMNS, "day") == tuple(checks.column_names)
        (row,) = rows.to_pylist()
        assert (v.stream_id, v.file_blake3, path.stat().st_size, url, v.head, v.events) == (
            row["stream_id"],
            row["file_blake3"],
            row["file_size"],
            row["url"],
            row["head"],
            row["events"],
        )
        assert ("distributed-device", "fail", "physical", 2, 0) == (
            row["gate"],
            row["verdict"],
            row["scope"],
            row["checks"],
            row["checks_failed"],
        )
        assert ["GPU-aaa", "GPU-bbb"] == [d["uuid"] for d in row["devices"]]
        assert ("push", row["first_time"].date().isoformat()) == (row["entered_by"], row["day"])
        assert row["first_time"] <= row["last_time"] <= row["indexed_time"]
        assert [("exit-zero", "pass"), ("output", "pass")] == [(c["name"], c["status"]) for c in checks.to_pylist()]
        assert {v.stream_id} == set(checks.column("stream_id").to_pylist())

    def test_partitioned_by_the_day_the_stream_began(self, tmp_path: Path) -> None:
        """Streams of two days land in two ``day=`` folders, checks and streams alike; the row's day is its own."""
        old, new = tmp_path / "old.aos", tmp_path / "new.aos"
        sealed_stream(old, opened_ns=1_700_000_000 * 10**9)  # 2023-11-14 UTC
        sealed_stream(new)
        store = tmp_path / "store"
        push(old, store)
        push(new, store)
        days = {f.split("/")[3] for f in index_files(store)}
        rows, _ = read_index(open_store(store))
        today = rows.to_pylist()[1]["first_time"].date().isoformat()
        assert {"day=2023-11-14", f"day={today}"} == days
        assert ["2023-11-14", today] == sorted(rows.column("day").to_pylist())

    def test_a_second_push_appends_and_readers_keep_one_row(self, stream: Path, tmp_path: Path) -> None:
        """Pushing the same stream again writes new files (none rewritten); the index still says it once."""
        store = tmp_path / "store"
        push(stream, store)
        first = {f: (store / f).read_bytes() for f in index_files(store)}
        push(stream, store)
        after = index_files(store)
        assert 4 == len(after)  # a streams and a checks file per push
        assert all((store / f).read_bytes() == data for f, data in first.items())
        assert not [f for f in after if "/." in f or f.endswith(".part")]
        rows, checks = read_index(open_store(store))
        assert 1 == rows.num_rows
        assert 2 == checks.num_rows
        assert rows.column("indexed_time")[0].as_py() == max(
            r["indexed_time"] for r in _all_rows(store)
        )  # the latest row

    def test_no_index_when_asked(self, stream: Path, tmp_path: Path) -> None:
        push(stream, tmp_path / "store", index=False)
        assert not (tmp_path / "store" / "index").exists()
        rows, checks = read_index(open_store(tmp_path / "store"))
        assert (0, 0) == (rows.num_rows, checks.num_rows)

    def test_a_file_changed_after_verification_is_not_indexed(self, stream: Path) -> None:
        """The row is of the bytes verified: a file changed in between is refused (stream-digest)."""
        v = verify_stream(stream)
        flip_byte(stream)
        assert "stream-digest" == refused(describe, stream, v, url="x", entered_by="push").name

    def test_damaged_and_foreign_index_files(self, stream: Path, tmp_path: Path) -> None:
        """An index file that is not Parquet, or Parquet of another schema, is refused (index-damaged)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        store = tmp_path / "store"
        push(stream, store)
        (name,) = [f for f in index_files(store) if "/streams/" in f]
        target = store / name
        target.chmod(0o644)
        data = target.read_bytes()
        target.write_bytes(data[: len(data) // 2])
        assert "index-damaged" == refused(read_index, open_store(store)).name
        # valid Parquet, but not the index's schema (one column renamed)
        table = pq.read_table(pa.BufferReader(data))
        pq.write_table(table.rename_columns(["x", *table.column_names[1:]]), target)
        assert "index-damaged" == refused(read_index, open_store(store)).name


def _all_rows(store: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return [r for f in index_files(store) if "/streams/" in f for r in pq.read_table(store / f).to_pylist()]


class TestCompaction:
    def test_a_day_of_many_files_is_merged_and_no_row_lost(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Past COMPACT_AT files a day is merged into one file; the index says exactly what it said before."""
        import observe.store_index

        paths = streams(tmp_path, 7)
        store = tmp_path / "store"
        for p in paths[:3]:
            push(p, store)
        before, before_checks = read_index(open_store(store))
        monkeypatch.setattr(observe.store_index, "COMPACT_AT", 3)
        for p in paths[3:]:
            push(p, store)
        files = [f for f in index_files(store) if "/streams/" in f]
        assert len(files) <= 3
        rows, checks = read_index(open_store(store))
        assert 7 == len(set(rows.column("stream_id").to_pylist())) == rows.num_rows
        assert 14 == checks.num_rows
        kept = set(before.column("stream_id").to_pylist())

        def by_id(table: Any) -> list[str]:
            return sorted(repr(r) for r in table.drop_columns(["day"]).to_pylist() if r["stream_id"] in kept)

        assert by_id(before) == by_id(rows)
        assert by_id(before_checks) == by_id(checks)

    def test_checks_of_an_unfinished_append_are_left(self, tmp_path: Path) -> None:
        """A checks file whose streams file is not written yet is not merged (nor removed) by a compaction."""
        from observe.store_index import compact_day

        store = tmp_path / "store"
        for p in streams(tmp_path, 2):
            push(p, store)
        day = index_files(store)[0].split("/")[3].removeprefix("day=")
        lone = f"{index_prefix('checks')}/day={day}/1-0123456789abcdef.parquet"
        first_checks = next(f for f in index_files(store) if "/checks/" in f)
        open_store(store).put_bytes(lone, (store / first_checks).read_bytes())
        assert compact_day(open_store(store), day)
        assert lone in index_files(store)
        assert 2 == len([f for f in index_files(store) if "/checks/" in f])
        assert 1 == len([f for f in index_files(store) if "/streams/" in f])
        rows, checks = read_index(open_store(store))
        assert (2, 4) == (rows.num_rows, checks.num_rows)


class TestS3:
    def test_push_indexes_in_the_bucket(self, stream: Path, s3_bucket: S3Bucket) -> None:
        url = push(stream, f"{s3_bucket.url}/ci")
        keys = [o["Key"] for o in s3_bucket.client.list_objects_v2(Bucket=s3_bucket.name)["Contents"]]
        assert 3 == len(keys)
        assert all(k.startswith("ci/") for k in keys)
        assert 2 == sum(1 for k in keys if k.startswith(f"ci/{index_prefix('')}"))
        rows, _ = read_index(open_store(f"{s3_bucket.url}/ci"))
        assert [url] == rows.column("url").to_pylist()

    @pytest.mark.parametrize("compact_at", [16, 2], ids=["appends", "appends-and-compactions"])
    def test_two_writers_at_once_lose_no_row(self, tmp_path: Path, s3_bucket: S3Bucket, compact_at: int) -> None:
        """Two processes pushing into one bucket at the same moment (compacting the day as they go, with a
        threshold of 2): every stream has its row and its checks afterwards."""
        per_writer = 6
        for w in range(2):
            (tmp_path / f"w{w}").mkdir()
        batches = [streams(tmp_path / f"w{w}", per_writer) for w in range(2)]
        go = tmp_path / "go"
        script = textwrap.dedent(
            """
            import os, sys, time
            import observe.store_index
            from observe.store import push
            go, store, compact_at, *paths = sys.argv[1:]
            observe.store_index.COMPACT_AT = int(compact_at)
            push(paths[0], store, index=False)  # boto3's models loaded before the start
            while not os.path.exists(go):
                time.sleep(0.001)
            for p in paths:
                push(p, store)
            """
        )
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(go), s3_bucket.url, str(compact_at), *map(str, paths)],
                stderr=subprocess.PIPE,
                text=True,
            )
            for paths in batches
        ]
        go.touch()
        for p in procs:
            assert 0 == p.wait(timeout=300), p.stderr.read() if p.stderr else ""
        rows, checks = read_index(open_store(s3_bucket.url))
        expected = {verify_stream(p).stream_id for paths in batches for p in paths}
        assert expected == set(rows.column("stream_id").to_pylist())
        assert 2 * per_writer == rows.num_rows
        assert 2 * 2 * per_writer == checks.num_rows

    def test_listing_goes_past_one_page(self, stream: Path, s3_bucket: S3Bucket) -> None:
        """The store lists every index object, not S3's first page of 1000 (here a page of 2)."""
        store: Any = open_store(s3_bucket.url)
        for i in range(5):
            store.put_bytes(f"{index_prefix('streams')}/x{i}", b"")
        client = store.client()
        real = client.get_paginator

        def small_pages(name: str) -> object:
            pages = real(name)
            orig = pages.paginate
            pages.paginate = lambda **kw: orig(**kw, PaginationConfig={"PageSize": 2})
            return pages

        client.get_paginator = small_pages
        try:
            assert 5 == len(store.list_names(index_prefix("streams") + "/"))
        finally:
            client.get_paginator = real


class TestOtherEngines:
    """The index is plain Parquet with Hive partitions: engines read it without this tool."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Path:
        store = tmp_path / "store"
        for path in streams(tmp_path, 3):
            push(path, store)
        sealed_stream(tmp_path / "f.aos", verdict="fail")
        push(tmp_path / "f.aos", store)
        return store

    def test_duckdb_offline(self, store: Path) -> None:
        """DuckDB reads it with its built-in Parquet reader; no extension is installed or loaded."""
        import duckdb

        con = duckdb.connect(
            ":memory:", config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
        )
        glob = f"{store}/index/v2/streams/*/*.parquet"
        rows = con.execute(
            "SELECT verdict, count(*), min(day) = max(day) FROM read_parquet(?, hive_partitioning = true) "
            "GROUP BY verdict ORDER BY verdict",
            [glob],
        ).fetchall()
        assert [("fail", 1, True), ("pass", 3, True)] == rows
        failed = con.execute(
            "SELECT count(*) FROM read_parquet(?) WHERE status = 'pass'", [f"{store}/index/v2/checks/*/*.parquet"]
        ).fetchone()
        assert (8,) == failed
        foreign = "loaded AND installed_from NOT IN ('', 'statically_linked')"
        assert [] == con.execute(f"SELECT extension_name FROM duckdb_extensions() WHERE {foreign}").fetchall()

    def test_datafusion(self, store: Path) -> None:
        """DataFusion reads the same files, the day partition as a column."""
        import datafusion
        import pyarrow as pa

        ctx = datafusion.SessionContext()
        ctx.register_parquet(
            "streams",
            str(store / "index" / "v2" / "streams"),
            table_partition_cols=[("day", pa.string())],
            file_extension=".parquet",
        )
        got = ctx.sql("SELECT verdict, count(*) AS n FROM streams GROUP BY verdict ORDER BY verdict").to_pydict()
        assert {"verdict": ["fail", "pass"], "n": [1, 3]} == got
        (day,) = set(ctx.sql("SELECT day FROM streams").to_pydict()["day"])
        rows, _ = read_index(open_store(store))
        assert {day} == set(rows.column("day").to_pylist())


def recipes() -> list[str]:
    """The python blocks of docs/FORMAT.md section 8."""
    text = (ROOT / "docs" / "FORMAT.md").read_text(encoding="utf-8")
    section = text[text.index("## 8. The evidence index") :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


class TestRecipes:
    """docs/FORMAT.md section 8's recipes, run as written after the push it names."""

    @pytest.fixture(scope="class")
    @classmethod
    def folder(cls, tmp_path_factory: pytest.TempPathFactory) -> Path:
        d = tmp_path_factory.mktemp("index-recipes")
        gate = alpha("observe", "gate", "exit-zero", "--quiet", "--out", "ci.aos", "--", "true", cwd=d, timeout=120)
        assert 0 == gate.returncode, gate.stderr
        pushed = alpha("observe", "push", "ci.aos", "--store", "aos-store", cwd=d, timeout=120)
        assert 0 == pushed.returncode, pushed.stderr
        return d

    @pytest.mark.parametrize("engine", [0, 1], ids=["duckdb", "datafusion"])
    def test_recipe(self, folder: Path, engine: int) -> None:
        code = recipes()[engine]
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=120, check=False
        )
        assert 0 == done.returncode, done.stderr
        assert ["pass"] == ast.literal_eval(done.stdout.strip().splitlines()[-1])

    def test_two_recipes(self) -> None:
        assert ["import duckdb", "import pyarrow as pa"] == [r.splitlines()[0] for r in recipes()]
