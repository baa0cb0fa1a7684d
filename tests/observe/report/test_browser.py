"""The report in a real browser (headless Chromium): what a reader sees, and that nothing goes wrong loading it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aos.reader import read_stream
from observe.report.write import write_report
from tests.helpers.browser import rendered
from tests.helpers.paths import ROOT
from tests.helpers.report import recorded_streams

SAMPLES = sorted(ROOT.glob("samples/evidence/*/**/*.report.html"))

#: Every in-page link that does not resolve to an element (JavaScript run in the page).
UNRESOLVED = """() => [...document.querySelectorAll('a[href^="#"]')]
    .map(a => a.getAttribute('href').slice(1)).filter(id => !document.getElementById(id))"""


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return recorded_streams(tmp_path_factory.mktemp("report-browser"))


def _expected(stream: Path) -> tuple[list[str], list[str]]:
    """The step names and check names the stream holds (as the recorder and the gate wrote them)."""
    from observe.report.write import text

    events = read_stream(stream).events
    steps = [text(e.attrs.get("name"), 256) for e in events if e.kind == "step.start"]
    verdicts = [e.attrs for e in events if e.kind == "verdict"]
    checks = [text(c["name"], 256) for c in verdicts[-1]["checks"]] if verdicts else []
    return steps, checks


def _check_page(browser: Any, page_path: Path, stream: Path, verdict: str) -> Any:
    """Open the page; assert the verdict, every step and check visible, links resolving, no problems."""
    r = rendered(browser, page_path)
    try:
        page = r.page
        assert verdict == page.inner_text("#verdict-word")
        steps, checks = _expected(stream)
        shown_steps = page.locator("details.step summary .step-name")
        assert steps == shown_steps.all_inner_texts()
        for i in range(shown_steps.count()):
            assert shown_steps.nth(i).is_visible()
        shown_checks = page.locator("tr.check .check-name")
        assert checks == shown_checks.all_inner_texts()
        for i in range(shown_checks.count()):
            assert shown_checks.nth(i).is_visible()
        assert [] == page.evaluate(UNRESOLVED)
        assert [] == r.problems
    except BaseException:
        r.close()
        raise
    return r


class TestRecordedStreams:
    @pytest.mark.parametrize(
        ("kind", "verdict"),
        [
            ("pass", "PASS"),
            ("fail", "FAIL"),
            ("inconclusive", "INCONCLUSIVE"),
            ("unsealed", "NO SEALED VERDICT"),
        ],
    )
    def test_report_renders(
        self, browser: Any, streams: dict[str, Path], tmp_path: Path, kind: str, verdict: str
    ) -> None:
        """The verdict, every step and every check are visible, every in-page link resolves, no console error."""
        out = tmp_path / f"{kind}.html"
        write_report(streams[kind], out)
        r = _check_page(browser, out, streams[kind], verdict)
        try:
            if kind in ("pass", "fail"):  # for people to look at (the brief asks for it)
                r.page.screenshot(path=f"/tmp/report-{kind}.png", full_page=True, timeout=240_000)
            if kind == "unsealed":
                assert "unsealed (recorder killed?)" == r.page.inner_text("#integrity-phrase")
        finally:
            r.close()

    def test_damaged_stream_renders(self, browser: Any, asset: Any, tmp_path: Path) -> None:
        """A truncated stream's page loads cleanly and says it is damaged."""
        out = tmp_path / "cut.html"
        write_report(asset("truncated-mid-batch.aos"), out)
        r = rendered(browser, out)
        try:
            assert "damaged: stream-truncated" == r.page.inner_text("#integrity-phrase")
            assert [] == r.page.evaluate(UNRESOLVED)
            assert [] == r.problems
        finally:
            r.close()

    def test_forgery_runs_nothing(self, browser: Any, streams: dict[str, Path], tmp_path: Path) -> None:
        """Script and markup the command printed, named and claimed are shown as text: nothing runs, no errors."""
        out = tmp_path / "forgery.html"
        write_report(streams["forgery"], out)
        dialogs: list[str] = []
        r = rendered(browser, out)
        try:
            page = r.page
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
            assert "pwned" not in page.title()
            assert 0 == page.evaluate("() => document.querySelectorAll('script, img, iframe, [onerror]').length")
            assert 0 == page.evaluate("() => document.querySelectorAll('a[href^=\"javascript\"]').length")
            assert "<script>document.title='pwned'" in page.inner_text("#output")
            assert [] == dialogs
            assert [] == r.problems
        finally:
            r.close()


class TestSamples:
    def test_there_are_sample_reports(self) -> None:
        """Each committed evidence stream has its report beside it."""
        assert len(SAMPLES) == len(sorted(ROOT.glob("samples/evidence/*/**/*.aos")))

    @pytest.mark.parametrize("page", SAMPLES, ids=lambda p: str(p.relative_to(ROOT / "samples/evidence")))
    def test_sample_report_renders(self, browser: Any, page: Path) -> None:
        """Every check and step of each committed evidence report is visible in Chromium, with no problem."""
        import json

        stream = page.with_name(page.name.removesuffix(".report.html") + ".aos")
        verdict = json.loads(stream.with_name(stream.stem + ".verdict.json").read_text())["verdict"]
        _check_page(browser, page, stream, verdict.upper()).close()
