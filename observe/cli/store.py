"""Store commands: push a stream into a content-addressed store, fetch one back (observe.store)."""

from __future__ import annotations

from pathlib import Path

import click

from observe.cli.options import STREAM, example, out_option, public_key, public_key_option, reports_refusals
from observe.env import StoreVars

__all__ = ["COMMANDS", "fetch_command", "push_command"]

_KEY_HELP = "Ed25519 public key (PEM) the seal must be signed by."


@example("alpha observe push ci.aos --store s3://evidence/ci")
@click.command("push")
@click.argument("stream", type=STREAM)
@click.option(
    "--store",
    "store",
    default="aos-store",
    show_default=True,
    envvar=StoreVars.STORE,
    metavar="URL",
    help="A folder, file:///PATH, or s3://BUCKET/PREFIX (endpoint and credentials from the AWS variables). "
    "Default: $ALPHA_STORE, else ./aos-store.",
)
@public_key_option(_KEY_HELP)
@reports_refusals()
def push_command(stream: Path, store: str, key: str | None) -> None:
    """Verify a sealed stream and store it as STORE/<its BLAKE3>.aos; print that URL.

    A stream that does not verify is refused by name and nothing is stored.
    Pushing the same file again stores nothing new.
    """
    from observe.store import push

    url = push(stream, store, public_key(key))  # a bad key file is refused too (stream-signature)
    click.echo(url)


@example("alpha observe fetch s3://evidence/ci/<blake3>.aos -o ci.aos")
@click.command("fetch")
@click.argument("url")
@out_option(
    "Where to write the stream (a folder: the stream keeps its stored name).",
    required=True,
    type=click.Path(path_type=Path),
    metavar="PATH",
)
@public_key_option(_KEY_HELP)
@reports_refusals()
def fetch_command(url: str, out: Path, key: str | None) -> None:
    """Fetch a stored stream, only if its bytes hash to its name and it verifies; print where it went.

    Nothing is written at the target unless both hold (refused: stream-digest,
    or the stream's own refusal).
    """
    from observe.store import fetch

    path = fetch(url, out, public_key(key))
    click.echo(str(path))


COMMANDS: list[click.Command] = [push_command, fetch_command]
