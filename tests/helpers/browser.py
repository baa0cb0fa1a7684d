"""Open a page of ours in the session's headless Chromium and say what a reader (and the console) saw.

``rendered(browser, path)`` loads a local HTML file with every network request refused and recorded (the
report and the site are self-contained: a single load from outside ``file://`` is a defect), collects
console errors and page errors, and returns the live ``Page`` for DOM checks. Callers close it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Flags for a root user on a machine with no network (the browser must not try to reach Google).
LAUNCH_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


@dataclass
class Rendered:
    """A page as the browser rendered it, with everything that went wrong while it loaded."""

    page: Any
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    #: Requests to anything but a local file: refused, and listed here.
    outside: list[str] = field(default_factory=list)
    #: Local files the page asked for that do not exist.
    missing: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return [
            *(f"console error: {m}" for m in self.console_errors),
            *(f"page error: {m}" for m in self.page_errors),
            *(f"network load: {u}" for u in self.outside),
            *(f"missing file: {u}" for u in self.missing),
        ]

    def close(self) -> None:
        self.page.context.close()


def rendered(browser: Any, path: Path, *, width: int = 1280, height: int = 900) -> Rendered:
    """Load ``path`` (an HTML file) and wait until it has loaded; see the module's docstring."""
    context = browser.new_context(viewport={"width": width, "height": height}, java_script_enabled=True)
    page = context.new_page()
    out = Rendered(page)
    page.on("console", lambda msg: out.console_errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: out.page_errors.append(str(exc)))

    def route(r: Any) -> None:
        url: str = r.request.url
        if url.startswith("file://"):
            local = Path(url[len("file://") :].split("#", 1)[0].split("?", 1)[0])
            if not local.exists():
                out.missing.append(url)
            r.continue_()
        elif url.startswith("data:"):
            r.continue_()
        else:
            out.outside.append(url)
            r.abort()

    context.route("**/*", route)
    page.goto(path.resolve().as_uri(), wait_until="load")
    return out
