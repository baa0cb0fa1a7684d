"""``alpha observe report``: the model, the page, its caps, its determinism, and forged input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aos.signing import load_public_key
from aos.verify import verify_stream
from observe.report.page import render
from observe.report.plots import BUCKETS, Series, line_plot
from observe.report.write import CAPS, Caps, ReportFacts, build_model, write_report
from tests.helpers.paths import ROOT
from tests.helpers.report import IMG, SCRIPT, recorded_streams, synthetic_stream
from tests.helpers.run import alpha

#: The committed GPU evidence streams and the report beside each (README.md links them).
SAMPLES = sorted(ROOT.glob("samples/evidence/*/**/*.aos"))


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return recorded_streams(tmp_path_factory.mktemp("report-streams"))


def report(stream: Path, tmp_path: Path, name: str = "page.html") -> tuple[ReportFacts, str]:
    out = tmp_path / name
    facts = write_report(stream, out)
    return facts, out.read_text(encoding="utf-8")


def ids(page: str) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', page))


def links(page: str) -> list[str]:
    return re.findall(r'\bhref="#([^"]*)"', page)


class TestModel:
    @pytest.mark.parametrize("kind", ["pass", "fail", "inconclusive"])
    def test_sealed_verdict_is_reported(self, streams: dict[str, Path], tmp_path: Path, kind: str) -> None:
        """A sealed stream's facts are its verdict, scope, gate and event count; integrity intact and sealed."""
        facts, page = report(streams[kind], tmp_path)
        v = verify_stream(streams[kind])
        assert (kind, "command", "report-test") == (facts.verdict, facts.scope, facts.gate)
        assert ("intact and sealed", v.events, v.stream_id) == (facts.integrity, facts.events, facts.stream_id)
        assert facts.page_bytes == len(page.encode())
        assert f'<span class="word" id="verdict-word">{kind.upper()}</span>' in page

    def test_every_check_is_on_the_page_with_its_reason(self, streams: dict[str, Path], tmp_path: Path) -> None:
        """Each check of the sealed verdict appears by name, status and reason (escaped)."""
        from markupsafe import escape

        _, page = report(streams["fail"], tmp_path)
        checks = verify_stream(streams["fail"]).verdict["checks"]  # type: ignore[index]
        assert checks
        for c in checks:
            assert f'<td class="mono check-name">{escape(c["name"])}</td>' in page
            assert str(escape(c["reason"])) in page
        assert "2 tests failed" in page  # the failing step's stderr
        assert "exit 1" in page

    def test_unsealed_stream_says_so(self, streams: dict[str, Path], tmp_path: Path) -> None:
        """A recorder killed with SIGKILL: no sealed verdict, integrity unsealed, the unfinished step and its output."""
        facts, page = report(streams["unsealed"], tmp_path)
        assert (None, None, None) == (facts.verdict, facts.scope, facts.gate)
        assert "unsealed (recorder killed?)" == facts.integrity
        assert "refused: stream-unsealed: no seal; last intact seq" in page
        assert "none recorded: the recording did not finish" in page
        assert re.search(r'<b class="step-name">work</b> · <span class="s-fail">unfinished</span>', page)
        assert "line-1\n" in page

    def test_every_known_bad_stream_gets_a_page_naming_its_damage(
        self, asset_manifest: dict[str, dict[str, Any]], asset: Any, tmp_path: Path
    ) -> None:
        """Each known-bad stream of tests/assets: a page, never an exception, saying what the verifier refuses."""
        assert len(asset_manifest) > 20
        for name, meta in sorted(asset_manifest.items()):
            if not name.endswith(".aos"):
                continue
            key = load_public_key(asset(meta["key"])) if meta.get("key") else None
            out = tmp_path / f"{name}.html"
            facts = write_report(asset(name), out, public_key=key)
            page = out.read_text()
            refusal = meta.get("refusal")
            if refusal is None:
                assert facts.integrity.startswith("intact and sealed"), name
                continue
            want = "unsealed (recorder killed?)" if refusal == "stream-unsealed" else f"damaged: {refusal}"
            assert want == facts.integrity, name
            assert facts.verdict is None, name
            assert f"refused: {refusal}: " in page, name

    @pytest.mark.parametrize("content", [b"", b"not a stream at all\n", bytes(range(256)) * 40])
    def test_garbage_is_a_page_not_a_traceback(self, tmp_path: Path, content: bytes) -> None:
        """A file that is no stream at all (empty, text, binary) gets a page saying it is damaged."""
        bad = tmp_path / "bad.aos"
        bad.write_bytes(content)
        facts, page = report(bad, tmp_path)
        assert facts.integrity in ("damaged: stream-truncated", "damaged: stream-schema")
        assert (None, 0) == (facts.stream_id, facts.events)
        assert "not a readable AOS stream" in page

    def test_bit_flipped_stream_keeps_what_came_before(self, asset: Any, tmp_path: Path) -> None:
        """A flipped byte: the page names stream-chain and still shows the events before the damage."""
        facts, page = report(asset("flipped-byte.aos"), tmp_path)
        assert facts.integrity.startswith("damaged: ")
        assert facts.events > 0
        assert f"{facts.events} events before the damage" in page

    def test_signed_stream_names_its_key_and_whether_it_was_checked(self, asset: Any, tmp_path: Path) -> None:
        """A signed stream: the key id it names; with the public key, checked (a wrong key: stream-signature)."""
        stream = asset("good-signed.aos")
        key_id = verify_stream(stream).key_id
        assert f"intact and sealed, signed by key {key_id}" == write_report(stream, tmp_path / "a.html").integrity
        checked = write_report(stream, tmp_path / "b.html", public_key=load_public_key(asset("signer.pub")))
        assert f"intact and sealed, signed by key {key_id} (signature checked)" == checked.integrity
        wrong = write_report(stream, tmp_path / "c.html", public_key=load_public_key(asset("forger.pub")))
        assert "damaged: stream-signature" == wrong.integrity


class TestPage:
    @pytest.mark.parametrize("kind", ["pass", "fail", "inconclusive", "unsealed", "forgery"])
    def test_every_link_resolves_to_an_element_of_the_page(
        self, streams: dict[str, Path], tmp_path: Path, kind: str
    ) -> None:
        """Every in-page href (checks' cited events, steps, sections) names an id the page holds, once."""
        _, page = report(streams[kind], tmp_path)
        found = re.findall(r'\bid="([^"]+)"', page)
        assert len(found) == len(set(found)), "duplicate ids"
        missing = sorted(set(links(page)) - set(found))
        assert [] == missing

    def test_checks_link_the_events_they_cite(self, streams: dict[str, Path], tmp_path: Path) -> None:
        """Each seq a check cites is linked from the check and rendered as an anchor with its attrs."""
        _, page = report(streams["pass"], tmp_path)
        v = verify_stream(streams["pass"]).verdict
        cited = {s for c in v["checks"] for s in c["evidence"]}  # type: ignore[index]
        assert cited
        for seq in cited:
            assert f'href="#event-{seq}"' in page
            assert f'<div class="event" id="event-{seq}">' in page

    @pytest.mark.parametrize("kind", ["pass", "unsealed"])
    def test_a_small_stream_is_read_once_and_gives_the_same_page(
        self, streams: dict[str, Path], tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Issue 36: a stream under KEEP_EVENTS and KEEP_BYTES is read once, its cited events taken from the
        first read; the page is the one made by reading the stream again for them (both caps set to nothing),
        and a verification handed in (the caller's, of the same file) gives the page it would have made itself."""
        import aos.reader
        import observe.report.model as model

        opened: list[str] = []
        real = aos.reader.StreamFile.events

        def counted(self: Any) -> Any:
            opened.append(self.path.name)
            return real(self)

        monkeypatch.setattr(aos.reader.StreamFile, "events", counted)
        once = render(build_model(streams[kind]))
        assert 1 == len(opened)
        monkeypatch.setattr(model, "KEEP_EVENTS", 0)
        opened.clear()
        again = render(build_model(streams[kind]))
        assert 2 == len(opened) if kind == "pass" else 1 <= len(opened)
        assert once == again
        if kind == "pass":
            handed = render(build_model(streams[kind], verification=verify_stream(streams[kind])))
            assert once == handed

    def test_ansi_colours_are_rendered(self, streams: dict[str, Path], tmp_path: Path) -> None:
        """A step's coloured output is shown in colour (ansi2html spans), without the escape sequences."""
        _, page = report(streams["pass"], tmp_path)
        assert re.search(r'<span style="color: #[0-9a-fA-F]{6}">ok</span>', page)
        assert re.search(r'<span style="[^"]*font-weight: bold[^"]*">red</span>', page)
        assert "\x1b" not in page

    def test_the_same_stream_gives_the_same_bytes(self, streams: dict[str, Path], tmp_path: Path) -> None:
        """Two reports of one stream, written at different times to different files, are byte-identical."""
        for kind in ("pass", "unsealed"):
            a, b = tmp_path / "a" / "page.html", tmp_path / "b" / "page.html"
            a.parent.mkdir(exist_ok=True)
            b.parent.mkdir(exist_ok=True)
            write_report(streams[kind], a)
            write_report(streams[kind], b)
            assert a.read_bytes() == b.read_bytes()

    def test_back_link_is_shown_and_escaped(self, streams: dict[str, Path], tmp_path: Path) -> None:
        """The back link the site passes is at the top; its text is escaped like everything else."""
        out = tmp_path / "r.html"
        write_report(streams["pass"], out, back_link=("../index.html", "<b>tracker</b>"))
        page = out.read_text()
        assert '<a class="back" href="../index.html">&larr; &lt;b&gt;tracker&lt;/b&gt;</a>' in page

    def test_no_network_loads_and_nothing_executable_from_outside(
        self, streams: dict[str, Path], tmp_path: Path
    ) -> None:
        """The page references no URL (no src=, no http), and a CSP forbids script outright.

        The inline SVG's namespace (``xmlns="http://www.w3.org/2000/svg"``, on a telemetry plot when the
        recording lasted past one sample) is a name that is never fetched, so it is set aside first.
        """
        _, page = report(streams["pass"], tmp_path)
        page = page.replace('xmlns="http://www.w3.org/2000/svg"', "")
        assert not re.search(r"\bsrc=|https?://|@import|url\(", page)
        assert "default-src 'none'" in page


class TestForgery:
    def test_forged_markup_is_text_on_the_page(self, streams: dict[str, Path], tmp_path: Path) -> None:
        """Output, a step name, a receipt, a label and an artifact path that are HTML stay escaped text."""
        _, page = report(streams["forgery"], tmp_path)
        assert SCRIPT not in page
        assert IMG not in page
        assert "<script" not in page.lower()
        assert "<img" not in page.lower()
        assert "javascript:" not in page
        assert "&lt;script&gt;document.title=" in page  # shown, as text
        assert "&lt;img src=x onerror=" in page
        assert "click me" in page  # the hyperlink's text, without its link

    def test_osc_hyperlinks_never_become_links(self) -> None:
        """An OSC 8 hyperlink in output becomes its text: ansi2html would make an <a> of it."""
        from observe.report.write import ansi_html

        html = ansi_html(b"\x1b]8;;javascript:alert(1)\x07click\x1b]8;;\x07 \x1b]0;title\x1b\\<b>")
        assert "click &lt;b&gt;" == html
        assert "<a" not in html


class TestCaps:
    def test_big_output_keeps_tails_and_says_how_to_read_the_rest(self, tmp_path: Path) -> None:
        """A few-MB stream: each step's output is its last 64 KiB, with the command that reads all of it."""
        stream = synthetic_stream(tmp_path / "big.aos", 6 << 20)
        model = build_model(stream)
        assert all(st.out["stdout"].total > CAPS.tail for st in model.steps)
        assert all(len(st.out["stdout"].bytes()) <= CAPS.tail for st in model.steps)
        page = render(model, stream_name="big.aos")
        assert "are shown here; all of it: <code>alpha observe read big.aos --stdout --step epoch-0</code>" in page
        assert len(page.encode()) <= CAPS.page
        assert len(model.cpu.points()) <= 2 * 2 * BUCKETS

    def test_page_cap_shrinks_the_tails_until_the_page_fits(self, tmp_path: Path) -> None:
        """With a page cap below what the tails need, the tails shrink and the page fits the cap."""
        stream = synthetic_stream(tmp_path / "big.aos", 2 << 20)
        caps = Caps(page=160 * 1024)
        page = render(build_model(stream, caps), stream_name="big.aos")
        assert len(page.encode()) <= caps.page
        assert len(render(build_model(stream), stream_name="big.aos").encode()) > caps.page

    def test_output_tails_are_kept_for_so_many_steps(self, tmp_path: Path) -> None:
        """Past ``Caps.tails`` steps, a step's output is counted, not kept, and the page says how to read it."""
        stream = synthetic_stream(tmp_path / "big.aos", 1 << 20)
        model = build_model(stream, Caps(tails=1))
        assert [True, False, False, False] == [bool(st.out["stdout"].bytes()) for st in model.steps]
        assert all(st.out["stdout"].total > 0 for st in model.steps)
        page = render(model, stream_name="big.aos")
        assert "none is shown here; all of it: <code>alpha observe read big.aos --stdout --step epoch-3</code>" in page

    def test_series_stay_bounded_and_keep_extremes(self) -> None:
        """A million samples keep at most 2 x BUCKETS buckets, and the one spike survives."""
        s = Series("x")
        for i in range(1_000_000):
            s.add(i, 1000 if i == 777_777 else i % 7)
        pts = s.points()
        assert len(pts) <= 4 * BUCKETS
        assert (777_777, 1000) in pts
        assert 0 == min(v for _, v in pts)
        plot = line_plot("x", [s], span_ns=1_000_000)
        assert plot.traces[0].points.count(",") == len(pts)


class TestCli:
    def test_report_writes_the_page(self, streams: dict[str, Path], tmp_path: Path) -> None:
        """``alpha observe report STREAM -o FILE`` writes the page and says what it found; exit 0."""
        out = tmp_path / "r.html"
        proc = alpha("observe", "report", str(streams["fail"]), "-o", str(out))
        assert 0 == proc.returncode, proc.stderr
        assert proc.stderr.startswith(f"alpha observe report: wrote {out} (".encode())
        assert b"; fail; intact and sealed)" in proc.stderr
        assert out.read_bytes() == _page(streams["fail"], tmp_path)

    def test_a_missing_stream_is_refused(self, tmp_path: Path) -> None:
        """A path that is not a file is refused as stream-missing, exit 1, nothing written."""
        out = tmp_path / "r.html"
        proc = alpha("observe", "report", str(tmp_path / "nope.aos"), "-o", str(out))
        assert 1 == proc.returncode
        assert proc.stderr.startswith(b"refused: stream-missing: ")
        assert not out.exists()

    def test_record_does_not_import_the_template_engine(self) -> None:
        """Loading the CLI (as ``record -- true`` does) imports neither jinja2 nor ansi2html."""
        code = "import sys, observe.cli.root; print(sorted(m for m in ('jinja2', 'ansi2html') if m in sys.modules))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True).stdout
        assert "[]" == out.strip()


def _page(stream: Path, tmp_path: Path) -> bytes:
    out = tmp_path / "again" / stream.with_suffix(".html").name
    out.parent.mkdir(exist_ok=True)
    write_report(stream, out)
    return out.read_bytes()


class TestSamples:
    def test_there_are_samples(self) -> None:
        """The committed GPU evidence streams are found (one-gpu-h200 and two-gpu-h200)."""
        assert len(SAMPLES) >= 10

    @pytest.mark.parametrize("stream", SAMPLES, ids=lambda p: str(p.relative_to(ROOT / "samples/evidence")))
    def test_committed_report_is_what_the_stream_gives(self, stream: Path, tmp_path: Path) -> None:
        """Each committed ``*.report.html`` equals a fresh report of its stream (regenerate: docs/REPORT.md)."""
        committed = stream.with_name(stream.stem + ".report.html")
        assert committed.exists(), f"{committed} is missing: alpha observe report {stream.name} -o {committed.name}"
        fresh = tmp_path / committed.name
        write_report(stream, fresh)
        assert committed.read_bytes() == fresh.read_bytes()
        verdict = json.loads(stream.with_name(stream.stem + ".verdict.json").read_text())
        assert f'id="verdict-word">{verdict["verdict"].upper()}<' in fresh.read_text()
