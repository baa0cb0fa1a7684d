"""The tracker's site in a real headless Chromium: every milestone, item and run shown with its status, every
relative link resolving, no console error, no network load, and no forged script running."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from tests.helpers.browser import Rendered, rendered
from tests.tracker.test_site import Built, build
from tracker.site import write_site


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Built, Path]]:
    """The test tracker (SQLite) of test_tracker_site and its site."""
    tmp = tmp_path_factory.mktemp("site")
    built = build(str(tmp / "progress.sqlite3"), tmp / "streams")
    out = tmp / "site"
    write_site(built.conn, out)
    yield built, out
    built.conn.close()


def check_links(r: Rendered, page: Path) -> int:
    """Every link on the page is relative and resolves: to a file that exists, and a ``#id`` to an element."""
    hrefs: list[list[str]] = r.page.eval_on_selector_all(
        "a[href]", "els => els.map(e => [e.getAttribute('href'), e.href])"
    )
    for raw, resolved in hrefs:
        assert not re.match(r"[a-z][a-z0-9+.-]*:|/", raw, re.I), f"{page}: link {raw!r} is not relative"
        url = urlsplit(resolved)
        assert "file" == url.scheme, resolved
        target = Path(unquote(url.path))
        assert target.is_file(), f"{page}: link {raw!r} names {target}, which does not exist"
        if url.fragment:
            text = target.read_text(encoding="utf-8")
            assert f'id="{url.fragment}"' in text, f"{page}: link {raw!r}: no element #{url.fragment} in {target}"
    return len(hrefs)


def shot(r: Rendered, name: str) -> None:
    r.page.screenshot(path=f"/tmp/alpha-site-{name}.png", full_page=True)


def test_index(browser: Any, site: tuple[Built, Path]) -> None:
    """Every milestone, item (with the status the streams support) and run (with state and verdict) is listed."""
    built, out = site
    r = rendered(browser, out / "index.html")
    try:
        shot(r, "index")
        page = r.page
        milestones = page.eval_on_selector_all("section.milestone", "els => els.map(e => e.id)")
        assert ["milestone-M1", "milestone-M2"] == milestones
        items = dict(page.eval_on_selector_all("tr.item", "els => els.map(e => [e.dataset.item, e.dataset.status])"))
        assert {"N1": "implemented", "N2": "verified", "N9": "planned", "H1": "planned", "H2": "verified"} == items
        runs = {
            run: (state, verdict)
            for run, state, verdict in page.eval_on_selector_all(
                "tr.run", "els => els.map(e => [e.dataset.run, e.dataset.state, e.dataset.verdict])"
            )
        }
        assert set(built.runs.values()) == set(runs)
        assert ("completed", "pass") == runs[built.runs["static"]]
        assert ("running", "unproven") == runs[built.runs["missing"]]
        assert ("failed", "unproven") == runs[built.runs["damaged"]]
        assert ("running", "no evidence") == runs[built.runs["empty"]]
        not_run = page.inner_text("#not-run")
        assert "N9 Never run: <script>window.__forged = 1</script>" in not_run  # shown as text
        assert "H1 Two GPUs, distributed lane: hardware, and no physical run" in not_run
        assert "GPU-1111" in page.inner_text("#has-run")
        assert page.evaluate("window.__forged") is None
        assert 0 == page.eval_on_selector_all("script", "els => els.length")
        assert check_links(r, out / "index.html") > 10
        assert [] == r.problems
    finally:
        r.close()


def test_run_page(browser: Any, site: tuple[Built, Path]) -> None:
    """A run page shows state, lane, verdict, scope, the observed GPU and driver, each artifact's SHA-256."""
    built, out = site
    page_path = out / f"runs/{built.runs['physical']}.html"
    r = rendered(browser, page_path)
    try:
        shot(r, "run")
        page = r.page
        assert "completed" == page.inner_text("#run-state").strip()
        assert "coordinate-device" == page.inner_text("#run-lane").strip()
        assert page.inner_text("#run-verdict").startswith("pass")
        assert "physical" == page.inner_text("#run-scope").strip()
        devices = page.inner_text("#devices + p + ul")
        assert "GPU-1111" in devices
        assert "driver 580.1" in devices
        assert "simulated" in devices
        assert "ab" * 32 in page.inner_text("table.artifacts")
        assert "<script>window.__forged = 1</script>" in page.inner_text("#run-note")
        assert page.evaluate("window.__forged") is None
        check_links(r, page_path)
        assert [] == r.problems
    finally:
        r.close()
    missing = out / f"runs/{built.runs['missing']}.html"
    r = rendered(browser, missing)
    try:
        shot(r, "run-missing")
        assert "stream not available here: the file is gone" in r.page.inner_text("section.stream")
        assert 0 == r.page.eval_on_selector_all("a.report", "els => els.length")
        check_links(r, missing)
        assert [] == r.problems
    finally:
        r.close()


def test_report_page(browser: Any, site: tuple[Built, Path]) -> None:
    """Each available stream has its report page, linked from its run page and linking back to it."""
    built, out = site
    run_page = out / f"runs/{built.runs['static']}.html"
    r = rendered(browser, run_page)
    try:
        (href,) = r.page.eval_on_selector_all("a.report", "els => els.map(e => e.getAttribute('href'))")
    finally:
        r.close()
    report = (run_page.parent / href).resolve()
    assert f"streams/{built.streams['static']}.html" == report.relative_to(out.resolve()).as_posix()
    r = rendered(browser, report)
    try:
        shot(r, "report")
        assert built.streams["static"] in r.page.inner_text("body")
        backs: list[str] = r.page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
        assert f"../runs/{built.runs['static']}.html" in backs
        check_links(r, report)
        assert [] == r.problems
    finally:
        r.close()


def test_run_pages_link_to_each_other(
    browser: Any, site: tuple[Built, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36: with the runs a page at a time (two a page here), every page's links resolve, index.html links
    to each older page, and following "newer runs" from the oldest page visits every page once, ending at
    index.html; each run is listed on one page."""
    import tracker.site

    built, _ = site
    monkeypatch.setattr(tracker.site, "RUNS_PER_PAGE", 2)
    out = tmp_path / "paged"
    write_site(built.conn, out)
    r = rendered(browser, out / "index.html")
    try:
        older = r.page.eval_on_selector_all("#run-pages a", "els => els.map(e => e.getAttribute('href'))")
        assert ["index-1.html", "index-2.html"] == older
        check_links(r, out / "index.html")
        assert [] == r.problems
    finally:
        r.close()
    seen: list[str] = []
    runs: list[str] = []
    name = "index-1.html"
    while name != "index.html":
        seen.append(name)
        r = rendered(browser, out / name)
        try:
            check_links(r, out / name)
            runs += r.page.eval_on_selector_all("tr.run", "els => els.map(e => e.dataset.run)")
            name = r.page.get_attribute("#newer", "href") or ""
            assert [] == r.problems
        finally:
            r.close()
        assert name not in seen
    r = rendered(browser, out / "index.html")
    try:
        runs += r.page.eval_on_selector_all("tr.run", "els => els.map(e => e.dataset.run)")
    finally:
        r.close()
    assert ["index-1.html", "index-2.html"] == seen
    assert sorted(built.runs.values()) == sorted(runs)
    assert len(runs) == len(set(runs))
