"""``alpha observe report``: a stream as one self-contained HTML page (``observe.report.write``)."""

from __future__ import annotations

from pathlib import Path

import click

from observe.cli.options import STREAM, Exit, example, out_option, public_key, public_key_option, reports_refusals

__all__ = ["COMMANDS", "report_command"]


@example("alpha observe report ci.aos -o ci.report.html")
@click.command("report")
@click.argument("stream", type=STREAM)
@out_option("Where to write the page (HTML).", required=True, aliases=("--output",))
@public_key_option("Also check the seal's signature against this Ed25519 public key (as verify --key).")
@reports_refusals()
def report_command(stream: Path, out: str, key: str | None) -> None:
    """Write STREAM as one self-contained HTML page: verdict, checks, steps, output, artifacts, devices.

    The page loads nothing from the network. A damaged or unsealed stream still
    gets its page, which says what is wrong; the same stream always gives the same
    bytes. Exit 0 written (whatever the stream's verdict or damage), 1 refused
    (STREAM is not a file: stream-missing; an unreadable --key: stream-signature)
    or FILE cannot be written, 2 usage.
    """
    from observe.util.allocator import keep_freed_memory

    keep_freed_memory()  # big buffers one after another: reuse their pages

    import os

    from aos.reader import open_regular
    from observe.report.write import write_report

    os.close(open_regular(stream))
    public = public_key(key)
    try:
        facts = write_report(stream, Path(out), public_key=public)
    except OSError as exc:
        click.echo(f"alpha observe report: cannot write {out}: {exc.strerror or exc}", err=True)
        raise SystemExit(Exit.FAIL) from None
    verdict = facts.verdict or "no sealed verdict"
    click.echo(f"alpha observe report: wrote {out} ({facts.page_bytes} bytes; {verdict}; {facts.integrity})", err=True)


COMMANDS: list[click.Command] = [report_command]
