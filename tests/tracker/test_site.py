"""`alpha tracker site DIR`: the site says what the attached streams prove, on both backends, idempotently."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aos.writer import StreamWriter
from tests.helpers.backends import PlainClient
from tests.helpers.cli import Cli
from tests.helpers.paths import ROOT
from tests.helpers.run import child_env
from tests.helpers.workers import TWO_GPU_TRACKER
from tracker import records
from tracker.attach import attach
from tracker.backends import Connection
from tracker.db import connect, init
from tracker.site import GENERATOR, MANIFEST, TrackerSiteDir, build_site, write_site
from tracker.testing import flip_byte, sealed_stream

#: Untrusted text, as a runner or a recorded command could write it.
FORGERY = '<script>window.__forged = 1</script><img src="https://example.invalid/x.png">'


def forged_stream(path: Path, *, gate: str, verdict: str = "pass", scope: str = "physical") -> str:
    """A sealed stream whose recorder-side attrs carry markup: a GPU name and an artifact path."""
    w = StreamWriter(path, background_flush=False, fsync="never")
    try:
        w.append("stream.open", {"stream_id": w.stream_id, "argv": ["true"], "gate": gate, "labels": {"x": FORGERY}})
        gpu = {"index": 0, "minor": 0, "uuid": "GPU-1111", "name": FORGERY, "memory": 1 << 30}
        w.append("device.observed", {"phase": "start", "observer": "simulated", "driver": "580.1", "gpus": [gpu]})
        w.append("process.start", {"pid": 1, "argv": ["true"]})
        w.append(
            "artifact",
            {"path": FORGERY, "size": 3, "mode": 0o644, "sha256": "ab" * 32, "blake3": "cd" * 32, "content": "inline"},
        )
        exit_seq = w.append(
            "process.exit", {"exit_code": 0, "signal": None, "timed_out": False, "duration_ns": 1, "rusage": {}}
        )
        checks = [{"name": "exit-zero", "status": "pass", "reason": FORGERY, "evidence": [exit_seq]}]
        w.append("verdict", {"gate": gate, "verdict": verdict, "scope": scope, "checks": checks})
        return w.seal().stream_id
    finally:
        w.close()


@dataclass
class Built:
    db: str
    conn: Connection
    work: Path
    runs: dict[str, str]
    streams: dict[str, str]


def build(db: str, work: Path) -> Built:
    """Two milestones; a verified item (static pass), a verified hardware item (physical pass), a hardware item
    with only a static run, an item never run; runs whose stream is missing, damaged, or holds markup."""
    work.mkdir(parents=True, exist_ok=True)
    conn = init(db)
    records.add_milestone(conn, "M1", "Static lanes")
    records.add_milestone(conn, "M2", "Physical " + FORGERY)
    records.add_item(conn, "N1", "Build every role", "M1", status="implemented")
    records.add_item(conn, "N2", "Check every executable", "M1", status="in-progress", depends_on=["N1"])
    records.add_item(conn, "N9", "Never run: " + FORGERY, "M1")
    records.add_item(conn, "H1", "Two GPUs, distributed lane", "M2", hardware=True)
    records.add_item(conn, "H2", "Two GPUs, coordinate lane", "M2", hardware=True)
    records.add_experiment(conn, "distributed", item="H1")
    runs: dict[str, str] = {}
    streams: dict[str, str] = {}

    def run(name: str, scope: str = "static", verdict: str = "pass", lane: str = "distributed-device") -> Path:
        runs[name] = records.start_run(conn, experiment="distributed", lane=lane, note=f"{name}: {FORGERY}")
        path = work / f"{name}.aos"
        streams[name] = sealed_stream(path, verdict=verdict, scope=scope, gate=lane).stream_id
        attach(conn, path, runs[name])
        return path

    run("static")
    records.finish_run(conn, runs["static"], "completed")
    records.set_item(conn, "N2", status="verified", runs=[runs["static"]])
    runs["physical"] = records.start_run(conn, lane="coordinate-device", note=FORGERY)
    streams["physical"] = forged_stream(work / "physical.aos", gate="coordinate-device")
    attach(conn, work / "physical.aos", runs["physical"])
    records.add_measurement(conn, runs["physical"], "step-time", 0.25, "s")
    records.finish_run(conn, runs["physical"], "completed", physical_pass=True)
    records.set_item(conn, "H2", status="verified", runs=[runs["physical"]])
    (run("missing")).unlink()
    flip_byte(run("damaged"))
    records.finish_run(conn, runs["damaged"], "failed")
    runs["empty"] = records.start_run(conn, lane="exit-zero")
    return Built(db, conn, work, runs, streams)


@pytest.fixture
def built(tracker_db: str, tmp_path: Path) -> Iterator[Built]:
    b = build(tracker_db, tmp_path / "streams")
    yield b
    b.conn.close()


def html(path: Path) -> str:
    return path.read_text(encoding="utf-8")


class TestModel:
    def test_streams_prove_or_say_why_not(self, built: Built, tmp_path: Path) -> None:
        """Each stream is proven, missing or damaged, as its file says; a run's verdict is its streams'."""
        site = build_site(built.conn, tmp_path)
        state = {s.stream_id: s.state for s in site.streams}
        ids = built.streams
        assert {ids["static"]: "proven", ids["physical"]: "proven", ids["missing"]: "missing"} == {
            k: v for k, v in state.items() if k != ids["damaged"]
        }
        assert "damaged" == state[ids["damaged"]]
        runs = site.runs_by_id
        assert "pass" == runs[built.runs["static"]].verdict
        assert "unproven" == runs[built.runs["missing"]].verdict
        assert "no evidence" == runs[built.runs["empty"]].verdict
        assert runs[built.runs["physical"]].physical_pass_proven
        assert not runs[built.runs["static"]].physical_pass_proven

    def test_the_stream_badge_says_what_it_means(self, built: Built, tmp_path: Path) -> None:
        """Beside a verdict, a proven stream's badge reads "file verified" and says in full what was verified."""
        write_site(built.conn, tmp_path / "site")
        index = html(tmp_path / "site" / "index.html")
        assert '<span class="badge t-proven" title="the stream file verified (intact, sealed)' in index
        assert ">file verified</span>" in index
        assert ">proven</span>" not in index

    def test_honest_status(self, built: Built, tmp_path: Path) -> None:
        """Implemented is not verified; a verified item is shown verified when its streams prove it; hardware
        items without a physical run are listed as such; an item with no run is listed as not run."""
        site = build_site(built.conn, tmp_path)
        shown = {i: it.shown for i, it in site.items.items()}
        assert {"N1": "implemented", "N2": "verified", "N9": "planned", "H1": "planned", "H2": "verified"} == shown
        assert ["N1", "N9", "H2"] != [i.id for i in site.not_run]
        assert {"N1", "N9"} == {i.id for i in site.not_run}
        assert [("H1", ["static"])] == [(i.id, scopes) for i, scopes in site.no_physical_run]

    def test_observed_devices_and_artifacts_come_from_the_stream(self, built: Built, tmp_path: Path) -> None:
        """The GPUs (with driver and observer) and artifacts are read from the stream's events."""
        site = build_site(built.conn, tmp_path)
        run = site.runs_by_id[built.runs["physical"]]
        assert [("GPU-1111", "simulated", "580.1")] == [(g.uuid, g.observer, g.driver) for g in run.gpus]
        assert [("ab" * 32, 3)] == [(a.sha256, a.size) for s in run.streams for a in s.artifacts]

    def test_a_row_that_disagrees_with_its_stream(self, tracker_db: str, tmp_path: Path) -> None:
        """A failing stream whose row was edited to say pass (a trigger dropped) cannot make its item verified
        on the site: the stream's verdict is shown, the row named as disagreeing, the item as claimed."""
        conn = init(tracker_db)
        try:
            records.add_milestone(conn, "M1", "m")
            records.add_item(conn, "N1", "n", "M1")
            run = records.start_run(conn, lane="exit-zero")
            sid = sealed_stream(tmp_path / "f.aos", verdict="fail", gate="exit-zero").stream_id
            attach(conn, tmp_path / "f.aos", run)
            records.finish_run(conn, run, "completed")
            plain = PlainClient(tracker_db)
            try:
                plain.drop_trigger("evidence_update", "evidence")
                plain.execute("UPDATE evidence SET verdict = 'pass'")
                plain.commit()
            finally:
                plain.close()
            records.set_item(conn, "N1", status="verified", runs=[run])  # the rule reads the edited row
            site = build_site(conn, tmp_path / "fetch")
        finally:
            conn.close()
        (stream,) = site.streams
        assert (sid, "disagrees", "fail") == (stream.stream_id, stream.state, stream.verdict)
        assert ["verdict: 'pass' in the tracker, 'fail' in the stream"] == stream.differ
        item = site.items["N1"]
        assert "claimed-verified" == item.shown
        assert f"its stream {sid}'s sealed verdict is fail" in item.proof
        assert "fail" == site.runs_by_id[run].verdict

    def test_a_stream_attached_from_a_store(self, tracker_db: str, tmp_path: Path) -> None:
        """A stream attached by URL is fetched from the store: proven while there, missing once gone."""
        from observe.store import push

        conn = init(tracker_db)
        try:
            run = records.start_run(conn, lane="distributed-device")
            sealed_stream(tmp_path / "s.aos")
            url = push(tmp_path / "s.aos", f"file://{tmp_path / 'store'}")
            (tmp_path / "s.aos").unlink()
            attach(conn, url, run)
            out = tmp_path / "site"
            first = write_site(conn, out)
            assert ["proven"] == [s.state for s in first.site.streams]
            assert url in html(out / first.site.runs[0].page)
            for f in (tmp_path / "store").glob("*.aos"):
                f.unlink()
            second = write_site(conn, out)
        finally:
            conn.close()
        (stream,) = second.site.streams
        assert "missing" == stream.state
        assert stream.detail.startswith("not in the store")
        assert "stream not available here" in html(out / second.site.runs[0].page)


def site_files(out: Path) -> dict[str, bytes]:
    """Every file of the site in ``out``, by its path there."""
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


class TestIncremental:
    """Issue 36: a build after runs were added or changed costs what changed, and gives what a full build gives."""

    def test_an_incremental_build_equals_a_full_build_file_by_file(
        self, built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Runs added (one filling a page), a run finished, a measurement and a stream attached to an old run:
        the site brought up to date is, file by file and its manifest included, the site a clean build in an
        empty folder with an empty cache writes."""
        import tracker.site

        monkeypatch.setattr(tracker.site, "RUNS_PER_PAGE", 2)
        out = tmp_path / "site"
        write_site(built.conn, out)
        for name in ("a", "b", "c"):
            run = records.start_run(built.conn, lane="distributed-device")
            sealed_stream(tmp_path / f"{name}.aos", scope="physical")
            attach(built.conn, tmp_path / f"{name}.aos", run)
        records.finish_run(built.conn, run, "completed", physical_pass=True)
        records.add_measurement(built.conn, built.runs["empty"], "step-time", 0.5, "s")
        sealed_stream(tmp_path / "late.aos", gate="exit-zero")
        attach(built.conn, tmp_path / "late.aos", built.runs["empty"])
        incremental = write_site(built.conn, out)
        assert (True, True) == (bool(incremental.unchanged), bool(incremental.written))  # not made again
        monkeypatch.setenv("ALPHA_CACHE", str(tmp_path / "empty-cache"))
        full = write_site(built.conn, tmp_path / "full")
        assert [] == full.unchanged
        assert site_files(tmp_path / "full") == site_files(out)

    def test_a_stream_edited_after_its_first_build_is_caught(self, built: Built, tmp_path: Path) -> None:
        """The forgery: a proven stream's bytes edited after the site's first build, its size and modification
        time put back. The memo keys on the file's change time too, so the next build reads it again: damaged,
        and the item it proved is no longer shown verified."""
        out = tmp_path / "site"
        first = write_site(built.conn, out)
        assert "verified" == first.site.items["N2"].shown
        path = built.work / "static.aos"
        st = path.stat()
        flip_byte(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert (st.st_size, st.st_mtime_ns) == (path.stat().st_size, path.stat().st_mtime_ns)
        second = write_site(built.conn, out)
        (view,) = second.site.runs_by_id[built.runs["static"]].streams
        assert ("damaged", None) == (view.state, view.facts)
        assert "claimed-verified" == second.site.items["N2"].shown
        assert "the file no longer matches the digest" in html(out / f"runs/{built.runs['static']}.html")
        assert 'data-item="N2" data-status="claimed-verified"' in html(out / "index.html")

    def test_a_page_edited_by_hand_is_caught_though_its_size_and_time_are_put_back(
        self, built: Built, tmp_path: Path
    ) -> None:
        """The memo of pages (a page whose file is as this user's last build left it is not read again) keys on
        the file's change time: a page edited to bytes of the same length, its modification time put back, is
        read, found changed and made again."""
        out = tmp_path / "site"
        write_site(built.conn, out)
        page = out / f"runs/{built.runs['physical']}.html"
        data, st = page.read_bytes(), page.stat()
        page.write_bytes(data.replace(b"<h1>", b"<h2>", 1))
        os.utime(page, ns=(st.st_atime_ns, st.st_mtime_ns))
        again = write_site(built.conn, out)
        assert [f"runs/{built.runs['physical']}.html"] == again.written
        assert data == page.read_bytes()

    def test_an_added_run_renders_and_reads_only_what_changed(
        self, built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Counted, not timed: a build after one run was added derives only its stream, renders only its page
        and the index (and makes only its report), and reads no page of the site: every other page is known
        unchanged from this user's memo of the pages. A build with nothing changed renders only the index."""
        import jinja2

        import observe.report.write as report_write
        import tracker.site
        import tracker.streams

        out = tmp_path / "site"
        write_site(built.conn, out)
        counts: dict[str, list[str]] = {"derive": [], "render": [], "report": [], "read": []}

        def counting(name: str, real: Any, label: Any) -> Any:
            def counted(*args: Any, **kw: Any) -> Any:
                counts[name].append(label(*args))
                return real(*args, **kw)

            return counted

        monkeypatch.setattr(
            tracker.streams, "derive", counting("derive", tracker.streams.derive, lambda p, *a: Path(p).name)
        )
        monkeypatch.setattr(jinja2.Template, "render", counting("render", jinja2.Template.render, lambda t, *a: t.name))
        monkeypatch.setattr(
            report_write, "write_report", counting("report", report_write.write_report, lambda p, *a: Path(p).name)
        )
        monkeypatch.setattr(tracker.site, "_read_page", counting("read", tracker.site._read_page, lambda p: p))
        again = write_site(built.conn, out)
        assert {"derive": [], "render": ["site_index.html.j2"], "report": [], "read": []} == counts
        assert [] == again.written
        for v in counts.values():
            v.clear()
        run = records.start_run(built.conn, lane="distributed-device")
        sealed_stream(tmp_path / "new.aos")
        attach(built.conn, tmp_path / "new.aos", run)
        added = write_site(built.conn, out)
        assert ["new.aos"] == counts["derive"] == counts["report"]
        assert ["site_index.html.j2", "site_run.html.j2"] == sorted(
            n for n in counts["render"] if n.startswith("site_")
        )
        assert [] == counts["read"]
        (report,) = [s.page for s in added.site.streams if s.run_id == run]
        assert sorted(["index.html", f"runs/{run}.html", str(report)]) == sorted(added.written)

    def test_the_manifest_and_report_keys_are_what_json_writes(self) -> None:
        """The site writes its manifest and its reports' keys without ``json``'s calls for plain strings; with a
        quote, a backslash, a control or a non-ASCII character they fall back to ``json``: the same bytes."""
        from tracker.site import _manifest_text, _report_key

        odd = ['a"b', "a\\b", "tab\there", "é", "\x7f"]
        for text in ["plain", "runs/x.html", *odd]:
            manifest = {"generator": GENERATOR, "format": 1, "files": {text: "ab" * 32}, "made": {"index.html": text}}
            assert (json.dumps(manifest, indent=1) + "\n").encode() == _manifest_text(manifest)
            back = (f"../runs/{text}.html", f"run {text}")
            expected = hashlib.sha256(json.dumps(["cd" * 32, text, list(back), "ef" * 32]).encode()).hexdigest()
            assert expected == _report_key("cd" * 32, text, back, "ef" * 32)
        empty = {"generator": GENERATOR, "format": 1, "files": {}}
        assert (json.dumps(empty, indent=1) + "\n").encode() == _manifest_text(empty)

    def test_a_memo_grows_by_what_changed_and_is_written_again_when_it_doubles(self, tmp_path: Path) -> None:
        """The site's memos (``site-checked``, ``site-pages``) append the entries that came, changed or went; a
        torn last line (a build killed while appending) is no entry; past twice its entries a memo is written
        again whole."""
        from tracker.site import _read_memo, _write_memo

        path = tmp_path / "memo"
        memo: dict[str, Any] = {f"k{i}": f"v{i}" for i in range(100)}
        _write_memo(path, memo, {}, 0)
        assert (memo, 100) == _read_memo(path)
        before = dict(memo)
        memo["k1"], memo["new"] = "changed", ["a", 1]
        del memo["k2"]
        _write_memo(path, memo, before, 100)
        got, lines = _read_memo(path)
        assert ({**memo, "new": '["a",1]'}, 103) == (got, lines)
        with path.open("a", encoding="utf-8") as f:
            f.write("torn-key-without-its")
        assert (got, -1) == _read_memo(path)  # no entry; the memo is to be written again whole
        _write_memo(path, got, got, -1)
        assert (got, -1) == _read_memo(path)  # nothing changed: left as it is
        got["k0"] = "zero"
        _write_memo(path, got, {**got, "k0": "v0"}, -1)
        assert (got, 100) == _read_memo(path)
        lines = 100
        for word in ("again", "and again"):
            before = dict(got)
            for i in range(3, 100):
                got[f"k{i}"] = word
            _write_memo(path, got, before, lines)
            _, lines = _read_memo(path)
        assert 100 + 97 + 97 > 2 * len(got) + 64  # so the second was written whole
        assert (got, 100) == _read_memo(path)


class TestFiles:
    def test_an_added_run_leaves_the_other_pages_untouched(self, built: Built, tmp_path: Path) -> None:
        """Issue 36: after a run is added, only its page, its stream's report and the index are written;
        every other page keeps its bytes and its modification time."""
        out = tmp_path / "site"
        write_site(built.conn, out)
        before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(out.rglob("*.html"))}
        run = records.start_run(built.conn, lane="distributed-device")
        sealed_stream(tmp_path / "new.aos")
        attach(built.conn, tmp_path / "new.aos", run)
        second = write_site(built.conn, out)
        (page,) = [r.page for r in second.site.runs if r.id == run]
        (report,) = [s.page for s in second.site.streams if s.run_id == run]
        assert report is not None
        assert sorted(["index.html", page, report]) == sorted(second.written)
        for path, (data, mtime) in before.items():
            if path != out / "index.html":
                assert (data, mtime) == (path.read_bytes(), path.stat().st_mtime_ns), path

    def test_runs_are_listed_a_page_at_a_time_and_an_added_run_rewrites_o1_pages(
        self, built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Issue 36: the runs' pages are numbered from the oldest, so an added run rewrites index.html (the
        newest runs) and, when it fills a page, that page and the one before it (its link to newer runs); every
        other page keeps its bytes and modification time. Each run is listed on exactly one page."""
        import tracker.site

        monkeypatch.setattr(tracker.site, "RUNS_PER_PAGE", 2)
        out = tmp_path / "site"
        first = write_site(built.conn, out)  # 5 runs: index-1 (runs 1-2), index-2 (3-4), index.html (5)
        assert ["index-1.html", "index-2.html", "index.html"] == sorted(f for f in first.files if "/" not in f)

        def listed(page: str) -> list[str]:
            return re.findall(r'<tr id="run-[^"]+" class="run" data-run="([^"]+)"', html(out / page))

        order = [r.id for r in first.site.runs]
        assert [order[0:2], order[2:4], order[4:]] == [
            listed(p) for p in ("index-1.html", "index-2.html", "index.html")
        ]
        assert 'href="index-2.html"' in html(out / "index-1.html")
        assert 'href="index.html"' in html(out / "index-2.html")
        assert 'href="index-1.html">1</a>, <a href="index-2.html">2</a>' in html(out / "index.html")

        def add_run(name: str) -> str:
            run = records.start_run(built.conn, lane="distributed-device")
            sealed_stream(tmp_path / name)
            attach(built.conn, tmp_path / name, run)
            return run

        def snapshot() -> dict[Path, tuple[bytes, int]]:
            return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(out.rglob("*.html"))}

        before = snapshot()
        sixth = add_run("sixth.aos")
        second = write_site(built.conn, out)  # index.html now holds runs 5 and 6: no other page changes
        (report,) = [s.page for s in second.site.streams if s.run_id == sixth]
        assert sorted(["index.html", f"runs/{sixth}.html", str(report)]) == sorted(second.written)
        assert [o for o in order[4:]] + [sixth] == listed("index.html")
        for path, stamp in before.items():
            if path.name != "index.html":
                assert stamp == (path.read_bytes(), path.stat().st_mtime_ns), path

        before = snapshot()
        seventh = add_run("seventh.aos")
        third = write_site(built.conn, out)  # a new page index-3 (runs 5, 6); index-2 now links to it
        (report,) = [s.page for s in third.site.streams if s.run_id == seventh]
        expected = ["index.html", "index-2.html", "index-3.html", f"runs/{seventh}.html", str(report)]
        assert sorted(expected) == sorted(third.written)
        assert [[*order[4:], sixth], [seventh]] == [listed("index-3.html"), listed("index.html")]
        assert 'href="index-3.html"' in html(out / "index-2.html")
        for path, stamp in before.items():
            if path.name not in ("index.html", "index-2.html"):
                assert stamp == (path.read_bytes(), path.stat().st_mtime_ns), path
        everywhere = [r for p in ("index-1.html", "index-2.html", "index-3.html", "index.html") for r in listed(p)]
        assert sorted(everywhere) == sorted(r.id for r in third.site.runs)
        assert len(everywhere) == len(set(everywhere)) == 7

    def test_run_pages_are_numbered_from_the_oldest(self) -> None:
        from tracker.site import run_pages

        assert [(0, 0)] == run_pages(0, 3)
        assert [(0, 3)] == run_pages(3, 3)
        assert [(0, 3), (3, 4)] == run_pages(4, 3)
        assert [(0, 3), (3, 6), (6, 7)] == run_pages(7, 3)
        assert run_pages(7, 3)[:2] == run_pages(8, 3)[:2]  # an added run moves no run between full pages

    def test_a_first_build_verifies_each_stream_once(
        self, built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Issue 36: a first build verifies each local stream once: its report takes the verification the site
        made (its page says the same as a report made alone, which verifies the stream itself)."""
        import aos.verify
        from observe.report.write import write_report

        verified: list[str] = []
        real = aos.verify.verify_stream

        def counted(path: Any, *args: Any, **kw: Any) -> Any:
            verified.append(Path(path).name)
            return real(path, *args, **kw)

        monkeypatch.setattr(aos.verify, "verify_stream", counted)
        out = tmp_path / "site"
        result = write_site(built.conn, out)
        assert ["physical.aos", "static.aos"] == sorted(verified)  # the damaged one fails its digest first
        verified.clear()
        run = result.site.runs_by_id[built.runs["static"]]
        (view,) = run.streams
        assert view.page is not None
        write_report(built.work / "static.aos", tmp_path / "alone.html", back_link=(f"../{run.page}", f"run {run.id}"))
        assert ["static.aos"] == verified
        assert (tmp_path / "alone.html").read_bytes() == (out / view.page).read_bytes()

    def test_a_report_is_made_again_only_when_what_it_is_made_from_changed(
        self, built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Issue 36: a rebuild makes a report page only for a stream new to the site, a page edited since,
        or one whose key (stream digest, name, link back, report code) the manifest does not hold."""
        import observe.report.write as report_write

        made: list[str] = []
        real = report_write.write_report

        def counted(stream: Any, out: Any, **kw: Any) -> Any:
            made.append(Path(stream).name)
            return real(stream, out, **kw)

        monkeypatch.setattr(report_write, "write_report", counted)
        out = tmp_path / "site"
        first = write_site(built.conn, out)
        reports = sorted(f for f in first.files if f.startswith("streams/"))
        assert len(made) == len(reports) >= 2
        made.clear()
        run = records.start_run(built.conn, lane="distributed-device")
        sealed_stream(tmp_path / "new.aos")
        attach(built.conn, tmp_path / "new.aos", run)
        write_site(built.conn, out)
        assert ["new.aos"] == made
        made.clear()
        edited, rekeyed = reports[0], reports[1]
        (out / edited).write_text("edited by hand", encoding="utf-8")
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        manifest["made"][rekeyed] = "0" * 64  # made by other code
        (out / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
        third = write_site(built.conn, out)
        assert 2 == len(made)
        assert (edited in third.written, rekeyed in third.unchanged) == (True, True)  # made again: the same bytes
        assert "edited by hand" not in (out / edited).read_text(encoding="utf-8")

    def test_a_stream_unchanged_since_the_last_build_is_not_read_again(
        self, built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Issue 36: this user's memo of the streams the site verified (in the user's cache, keyed by the
        evidence row and the file's identity): a rebuild derives no unchanged local stream again, the same
        pages; a file touched (chmod: its change time) or replaced is derived again, and a damaged one says so."""
        import tracker.streams

        derived: list[str] = []
        real = tracker.streams.derive

        def counted(path: Any, *args: Any, **kw: Any) -> Any:
            derived.append(Path(path).name)
            return real(path, *args, **kw)

        monkeypatch.setattr(tracker.streams, "derive", counted)
        out = tmp_path / "site"
        first = write_site(built.conn, out)
        pages = {p: p.read_bytes() for p in sorted(out.rglob("*.html"))}
        local = [s for s in first.site.streams if s.facts is not None and not s.row["url"]]
        assert len(local) >= 2
        assert len(derived) >= len(local)
        derived.clear()
        second = write_site(built.conn, out)
        assert [] == derived
        assert ([], pages) == (second.written, {p: p.read_bytes() for p in sorted(out.rglob("*.html"))})
        assert [(s.stream_id, s.state) for s in first.site.streams] == [
            (s.stream_id, s.state) for s in second.site.streams
        ]
        touched, damaged = Path(local[0].row["path"]), Path(local[1].row["path"])
        touched.chmod(0o600)
        damaged.chmod(0o644)
        flip_byte(damaged)
        third = write_site(built.conn, out)
        assert [touched.name] == derived  # the damaged one is found by its digest, before any verification
        (view,) = [s for s in third.site.streams if s.evidence_id == local[1].evidence_id]
        assert "damaged" == view.state

    def test_pages_and_idempotence(self, built: Built, tmp_path: Path) -> None:
        """Index, a page per run; regenerating writes nothing and gives the same bytes."""
        out = tmp_path / "site"
        first = write_site(built.conn, out)
        pages = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        assert {"index.html", MANIFEST} | {f"runs/{r}.html" for r in built.runs.values()} <= set(pages)
        manifest = json.loads(pages[MANIFEST])
        assert set(first.files) == set(manifest["files"]) == set(pages) - {MANIFEST}
        second = write_site(built.conn, out)
        assert ([], sorted(first.files)) == (second.written, second.unchanged)
        again = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        assert pages == again
        index = html(out / "index.html")
        for item in ("N1", "N2", "N9", "H1", "H2"):
            assert f'id="item-{item}"' in index
        assert "stream not available here" in html(out / f"runs/{built.runs['missing']}.html")
        damaged = html(out / f"runs/{built.runs['damaged']}.html")
        assert "the file no longer matches the digest recorded at attach" in damaged

    def test_regenerating_from_another_tracker_removes_old_pages_only(self, built: Built, tmp_path: Path) -> None:
        """Pages that no longer belong go; a file the site did not write, or a page edited by hand, stays."""
        out = tmp_path / "site"
        write_site(built.conn, out)
        (out / "notes.txt").write_text("mine")
        edited = out / f"runs/{built.runs['static']}.html"
        edited.write_text("edited by hand")
        other = init(str(tmp_path / "other.sqlite3"))
        try:
            new_run = records.start_run(other, lane="exit-zero")
            result = write_site(other, out)
        finally:
            other.close()
        old_runs = [f"runs/{r}.html" for r in built.runs.values() if r != built.runs["static"]]
        reports = [f"streams/{built.streams[k]}.html" for k in ("static", "physical")]
        assert sorted(old_runs + reports) == result.removed
        assert not (out / "streams").exists()  # the folder the site made, now empty
        assert [f"runs/{built.runs['static']}.html"] == result.kept
        assert "mine" == (out / "notes.txt").read_text()
        assert "edited by hand" == edited.read_text()
        assert {"index.html", f"runs/{new_run}.html"} == set(json.loads((out / MANIFEST).read_text())["files"])

    def test_refuses_a_folder_that_is_not_a_site(self, built: Built, tmp_path: Path) -> None:
        """A non-empty folder without our manifest, one with someone else's manifest, or a file of someone else's
        where a page goes: tracker-site-dir, and nothing is written or removed."""
        foreign = tmp_path / "docs"
        foreign.mkdir()
        (foreign / "index.html").write_text("someone's page")
        with pytest.raises(TrackerSiteDir) as info:
            write_site(built.conn, foreign)
        assert "tracker-site-dir" == info.value.name
        assert ["index.html"] == [p.name for p in foreign.iterdir()]
        (foreign / MANIFEST).write_text(json.dumps({"generator": "another tool", "files": {}}))
        with pytest.raises(TrackerSiteDir):
            write_site(built.conn, foreign)
        ours = tmp_path / "site"
        write_site(built.conn, ours)
        (ours / "index.html").unlink()
        manifest = json.loads((ours / MANIFEST).read_text())
        del manifest["files"]["index.html"]
        (ours / MANIFEST).write_text(json.dumps(manifest | {"generator": "alpha tracker site"}))
        (ours / "index.html").write_text("someone's page")
        with pytest.raises(TrackerSiteDir, match="was not written by"):
            write_site(built.conn, ours)
        assert "someone's page" == (ours / "index.html").read_text()
        afile = tmp_path / "a-file"
        afile.write_text("x")
        with pytest.raises(TrackerSiteDir):
            write_site(built.conn, afile)

    def test_a_build_stopped_before_its_manifest_is_finished(self, built: Built, tmp_path: Path) -> None:
        """A first build stopped (Ctrl-C) after some pages and before its manifest leaves a folder the next build
        finishes, equal to an uninterrupted one; so does a rebuild stopped after its new pages. A file among
        them that is not the page, byte for byte, is still someone's: refused, left as it is."""
        whole = tmp_path / "whole"
        write_site(built.conn, whole)
        pages = sorted(json.loads((whole / MANIFEST).read_text())["files"])
        stopped = tmp_path / "stopped"
        for rel in pages[: len(pages) // 2]:  # what the stopped build had written
            (stopped / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(whole / rel, stopped / rel)
        write_site(built.conn, stopped)
        assert _tree(whole) == _tree(stopped)
        # a rebuild stopped after writing the added run's page, before the manifest that lists it
        before = tmp_path / "before"
        shutil.copytree(whole, before)
        run = records.start_run(built.conn, lane="exit-zero")
        after = tmp_path / "after"
        write_site(built.conn, after)
        new_page = f"runs/{run}.html"
        shutil.copyfile(after / new_page, before / new_page)
        write_site(built.conn, before)
        assert _tree(after) == _tree(before)
        # not the page: someone's file, refused and kept
        third = tmp_path / "third"
        shutil.copytree(whole, third)
        (third / MANIFEST).unlink()
        (third / new_page).write_text("someone's page")
        with pytest.raises(TrackerSiteDir, match="is not empty and is not a site"):
            write_site(built.conn, third)
        assert "someone's page" == (third / new_page).read_text()
        assert not (third / MANIFEST).exists()

    def test_untrusted_text_is_escaped(self, built: Built, tmp_path: Path) -> None:
        """Titles, notes, GPU names and artifact paths holding markup come out as text, never as markup."""
        out = tmp_path / "site"
        write_site(built.conn, out)
        pages = [out / "index.html", *sorted((out / "runs").iterdir())]
        for page in pages:
            text = html(page)
            assert "<script" not in text, page
            assert "<img" not in text, page
            assert "script-src" not in text  # the policy allows no script at all
        assert "&lt;script&gt;window.__forged = 1&lt;/script&gt;" in html(out / f"runs/{built.runs['physical']}.html")
        assert "Never run: &lt;script&gt;" in html(out / "index.html")


def test_forged_ids_and_urls_stay_harmless(tracker_db: str, tmp_path: Path) -> None:
    """A stream id edited to a path (a trigger dropped) names no file outside the site; a CI job URL that is
    not http(s) is shown, never linked."""
    conn = init(tracker_db)
    try:
        ci = {
            "GITHUB_ACTIONS": "true",
            "GITHUB_SERVER_URL": "javascript:alert(1)//",
            "GITHUB_REPOSITORY": "o/r",
            "GITHUB_RUN_ID": "1",
        }
        run = records.start_run(conn, lane="distributed-device", environ=ci)
        real = sealed_stream(tmp_path / "s.aos").stream_id
        attach(conn, tmp_path / "s.aos", run)
        plain = PlainClient(tracker_db)
        try:
            plain.drop_trigger("evidence_update", "evidence")
            plain.execute("UPDATE evidence SET stream_id = '../../evil'")
            plain.commit()
        finally:
            plain.close()
        out = tmp_path / "deep" / "site"
        result = write_site(conn, out)
    finally:
        conn.close()
    assert not (tmp_path / "evil.html").exists()
    assert not (tmp_path / "deep" / "evil.html").exists()
    assert [f"streams/{real}.html"] == [f for f in result.files if f.startswith("streams/")]
    (stream,) = result.site.streams
    assert re.fullmatch(r"stream-x[0-9a-f]{32}", stream.anchor)
    assert "disagrees" == stream.state
    assert stream.differ[0].startswith("stream_id: '../../evil' in the tracker")
    page = html(out / result.site.runs[0].page)
    assert "github javascript:alert(1)/o/r/actions/runs/1<" in page
    assert 'href="javascript' not in page


def test_cli(built: Built, tmp_path: Path, cli: Cli) -> None:
    """`alpha tracker --db DB site DIR` says what it wrote; --json; a foreign folder is refused by name, exit 1."""
    out = tmp_path / "site"
    r = cli("tracker", "--db", built.db, "site", str(out))
    assert 0 == r.exit_code, r.output
    assert re.match(rf"site {re.escape(str(out))}: index.html, 5 run pages, \d+ stream reports ", r.output)
    assert "streams: 2 proven, 1 damaged, 1 missing" in r.output
    r = cli("tracker", "--db", built.db, "site", str(out), "--json")
    data: dict[str, Any] = json.loads(r.output)
    assert [] == data["written"]
    assert {"proven": 2, "disagrees": 0, "damaged": 1, "missing": 1} == data["streams"]
    shutil.rmtree(out)
    out.mkdir()
    (out / "README").write_text("x")
    r = cli("tracker", "--db", built.db, "site", str(out))
    assert 1 == r.exit_code
    assert r.output.startswith("refused: tracker-site-dir: ")


def test_a_tracker_that_is_not_there(tmp_path: Path, cli: Cli) -> None:
    """No tracker at --db: tracker-missing, as every read command."""
    r = cli("tracker", "--db", str(tmp_path / "none.sqlite3"), "site", str(tmp_path / "s"))
    assert 1 == r.exit_code
    assert r.output.startswith("refused: tracker-missing: ")
    assert not (tmp_path / "s").exists()


def test_connect_reads_only(built: Built, tmp_path: Path) -> None:
    """Writing the site changes nothing in the tracker (its journal has as many entries after)."""
    before = built.conn.execute("SELECT count(*) FROM journal").fetchone()[0]
    write_site(built.conn, tmp_path / "site")
    conn = connect(built.db)
    try:
        assert before == conn.execute("SELECT count(*) FROM journal").fetchone()[0]
    finally:
        conn.close()


# -- the committed sample: samples/tracker/site, the site of samples/tracker/example.sh's tracker ----------

SAMPLE = ROOT / "samples" / "tracker" / "site"
REGENERATE = (
    "regenerate it: bash samples/tracker/example.sh && "
    "alpha tracker --db ${TMPDIR:-/tmp}/alpha-tracker-example/progress.sqlite3 site samples/tracker/site"
)


def normalised(text: str, work: str) -> str:
    """A page with what differs between two runs of the example (ids, times, digests, its folder) replaced."""
    text = text.replace(work, "WORK")
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "RUN", text)
    text = re.sub(r"\b[0-9a-f]{32,64}\b", "HEX", text)
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", "TIME", text)


def run_sample(work: Path, script: str) -> Path:
    """Run ``samples/tracker/SCRIPT WORK`` as a user would (no ALPHA_ variables of the suite's); return WORK."""
    import subprocess

    env = child_env()
    proc = subprocess.run(
        ["bash", str(ROOT / "samples" / "tracker" / script), str(work)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False,
    )  # fmt: skip
    assert 0 == proc.returncode, proc.stdout + proc.stderr
    return work


def test_sample_site(tmp_path: Path) -> None:
    """The example's tracker gives the same bytes when its site is written again; the committed sample is a
    complete site of ours, its index what the tool writes today, and regenerating over it is accepted."""
    work = run_sample(tmp_path / "example", "example.sh")
    conn = connect(str(work / "progress.sqlite3"))
    try:
        out = tmp_path / "site"
        first = write_site(conn, out)
        before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        second = write_site(conn, out)
        assert [] == second.written
        assert before == {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        assert 3 == len(first.files)  # index, the run, the stream's report

        manifest = unedited(SAMPLE, REGENERATE)
        sample_work = re.search(r"<code>(/[^<]*)/distributed-static\.aos</code>", html(SAMPLE / first_run(SAMPLE)))
        assert sample_work is not None
        assert normalised(html(SAMPLE / "index.html"), sample_work.group(1)) == normalised(
            html(out / "index.html"), str(work)
        ), f"samples/tracker/site is not what `alpha tracker site` writes today; {REGENERATE}"

        copy = tmp_path / "sample-copy"
        shutil.copytree(SAMPLE, copy)
        again = write_site(conn, copy)
        assert sorted(set(manifest["files"]) - {"index.html"}) == again.removed
        assert sorted(again.files) == sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*.html"))
    finally:
        conn.close()


def unedited(site: Path, regenerate: str) -> dict[str, Any]:
    """The manifest of a committed site, after checking it lists every file and each file's SHA-256."""
    manifest: dict[str, Any] = json.loads((site / MANIFEST).read_text())
    present = {p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()} - {MANIFEST}
    assert set(manifest["files"]) == present, regenerate
    for rel, digest in manifest["files"].items():
        assert hashlib.sha256((site / rel).read_bytes()).hexdigest() == digest, f"{rel} was edited; {regenerate}"
    return manifest


TWO_GPU_SITE = ROOT / "samples" / "tracker" / "two-gpu-site"
TWO_GPU_REGENERATE = (
    "regenerate it: bash samples/tracker/two_gpu.sh && rm -rf samples/tracker/two-gpu-site && "
    "cp -r ${TMPDIR:-/tmp}/alpha-tracker-two-gpu/site samples/tracker/two-gpu-site"
)


@TWO_GPU_TRACKER
def test_two_gpu_sample_site(two_gpu_tracker: tuple[Path, str]) -> None:
    """samples/tracker/two-gpu-site is the site two_gpu.sh writes today (issue 15): every page the same once
    run ids, times and the checkout's folder are set aside; it shows the lanes' physical passes as proven by
    the streams and the controls' runs as what they are."""
    work = two_gpu_tracker[0]
    manifest = unedited(TWO_GPU_SITE, TWO_GPU_REGENERATE)
    written = json.loads((work / "site" / MANIFEST).read_text())
    assert (1, 5, 8) == (
        len([f for f in manifest["files"] if f == "index.html"]),
        len([f for f in manifest["files"] if f.startswith("runs/")]),
        len([f for f in manifest["files"] if f.startswith("streams/")]),
    )

    def pages(site: Path, files: dict[str, str], folder: str) -> list[str]:
        # The checkout's folder, only where it names the committed streams: a stream's own recorded cwd
        # (the lent machine's) stays as it is. Runs sort by id, that is by registration.
        return [normalised(html(site / f), f"{folder}/samples/evidence/") for f in sorted(files)]

    committed = re.search(
        r"<code>(/[^<]*)/samples/evidence/two-gpu-h200/", html(TWO_GPU_SITE / sorted(manifest["files"])[1])
    )
    assert committed is not None
    assert pages(TWO_GPU_SITE, manifest["files"], committed.group(1)) == pages(
        work / "site", written["files"], str(ROOT)
    ), f"samples/tracker/two-gpu-site is not what two_gpu.sh writes today; {TWO_GPU_REGENERATE}"

    index = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html(TWO_GPU_SITE / "index.html")))
    assert "3 work items across 1 milestone: 3 verified (proven by their streams)" in index
    assert "5 runs, 3 completed, 1 failed, 1 inconclusive; 3 physical passes proven by their streams" in index
    assert "8 attached streams: 8 proven" in index
    for uuid in ("GPU-bb5a03ab-c28f-2074-5197-3838b9dd4798", "GPU-275f8d7e-27b9-87cf-bff1-529752b689a5"):
        assert 6 == index.count(uuid)  # observed by the recorder in each of the five runs, and the GPUs' table


def first_run(site: Path) -> str:
    (page,) = (site / "runs").iterdir()
    return page.relative_to(site).as_posix()


def test_each_gpus_serial_and_health_at_its_last_run(tracker_db: str, tmp_path: Path) -> None:
    """The site's "On what": the H200 of issue 35's recording with its serial (from the stream, and kept beside its
    UUID) and its health at its last run; a fault the stream shows on it is said there too."""
    uuid = "GPU-c5e39284-e09f-9924-148e-f1889a6843f0"
    stream = ROOT / "samples" / "evidence" / "gpu-health-h200" / "worker.aos"
    conn = init(tracker_db)
    try:
        records.add_device(conn, "NVIDIA H200", uuid)
        run = records.start_run(conn, devices=[uuid], started_at_ns=1_796_083_200_000_000_000, environ={})
        attach(conn, stream, run)
        write_site(conn, tmp_path / "site")
        index = (tmp_path / "site" / "index.html").read_text()
        line = (
            "ECC enabled, uncorrected 0 volatile / 0 aggregate; row remaps pending no, failed no; PCIe gen 5 x16 of x16"
        )
        assert '<td class="serial"><code>1653924043232</code></td>' in index
        assert f'<td class="health">{line} (run <code>{run}</code>)</td>' in index
        page = (tmp_path / "site" / "runs" / f"{run}.html").read_text()
        assert f"<code>{uuid}</code> NVIDIA H200, serial <code>1653924043232</code>" in page
    finally:
        conn.close()


def test_a_fault_stays_said_in_the_gpus_health_line() -> None:
    from tracker.site import Gpu, _health_of, gpu_health

    health = {"ecc_mode": "enabled", "remap_pending": True, "unsupported": {"retired_pages_pending": 3}}
    g = _health_of(Gpu("GPU-x", "H200", "nvml", "580"), health, [{"gpu": "GPU-x", "type": "xid", "xid": 79}])
    g = _health_of(g, {**health, "remap_pending": False}, [])
    assert g.health is not None
    assert g.health.endswith("; XID 79")
    assert "row remaps pending no" in g.health
    assert "retired pages pending ?" in gpu_health({"unsupported": {"remap_pending": 3}})


def test_a_runs_gpus_are_listed_per_node(tracker_db: str, tmp_path: Path) -> None:
    """A run of four GPUs over two nodes: its page lists the GPUs node by node (two each), not one growing list."""
    conn = init(tracker_db)
    try:
        run = records.start_run(conn, lane="coordinate-device")
        path = tmp_path / "nodes.aos"
        w = StreamWriter(path, background_flush=False, fsync="never")
        try:
            w.append("stream.open", {"stream_id": w.stream_id, "argv": ["true"], "gate": "coordinate-device"})
            for k, host in enumerate(("lane@pod-a", "lane@pod-b")):
                gpus = [
                    {"index": i, "minor": i, "uuid": f"GPU-{k}{i}", "name": "NVIDIA H200", "memory": 1 << 30}
                    for i in range(2)
                ]
                node = {"host": host, "port": 2222}
                w.append("device.observed", {"phase": "start", "observer": "nvml", "gpus": gpus, "node": node})
            w.append("process.start", {"pid": 1, "argv": ["true"]})
            w.append("process.exit", {"exit_code": 0, "signal": None, "timed_out": False, "duration_ns": 1})
            w.append("verdict", {"gate": "coordinate-device", "verdict": "pass", "scope": "static", "checks": []})
            w.seal()
        finally:
            w.close()
        attach(conn, path, run)
        write_site(conn, tmp_path / "site")
        page = (tmp_path / "site" / "runs" / f"{run}.html").read_text()
        heads = re.findall(r'<h3 class="gpu-node">Node <code>([^<]+)</code> \((\d) GPUs\)</h3>', page)
        assert [("lane@pod-a:2222", "2"), ("lane@pod-b:2222", "2")] == heads
        second = page[page.index("lane@pod-b:2222</code> (2 GPUs)") :]
        assert re.findall(r"<li><code>(GPU-\d+)</code>", second[: second.index("</ul>")]) == ["GPU-10", "GPU-11"]
    finally:
        conn.close()


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by its relative path, with its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
