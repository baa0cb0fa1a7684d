"""Store commands: push a stream into a content-addressed store, fetch one back (observe.store)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from aos.refusals import Refusal
from observe.cli.refusing import refuse
from observe.env import StoreVars

if TYPE_CHECKING:
    from aos.signing import Verifier

__all__ = ["COMMANDS"]


def _key(path: str | None) -> Verifier | None:
    if path is None:
        return None
    from aos.signing import load_public_key

    return load_public_key(path)


_KEY = click.option(
    "--key", "key", type=click.Path(dir_okay=False), help="Ed25519 public key (PEM) the seal must be signed by."
)


@click.command("push")
@click.argument("stream", type=click.Path(path_type=Path))
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
@_KEY
def push_cmd(stream: Path, store: str, key: str | None) -> None:
    """Verify a sealed stream and store it as STORE/<its BLAKE3>.aos; print that URL.

    A stream that does not verify is refused by name and nothing is stored.
    Pushing the same file again stores nothing new.
    """
    from observe.store import push

    try:
        url = push(stream, store, _key(key))  # a bad key file is refused too (stream-signature)
    except Refusal as exc:
        refuse(exc)
    click.echo(url)


@click.command("fetch")
@click.argument("url")
@click.option(
    "-o",
    "--out",
    "out",
    required=True,
    type=click.Path(path_type=Path),
    help="Where to write the stream (a folder: the stream keeps its stored name).",
)
@_KEY
def fetch_cmd(url: str, out: Path, key: str | None) -> None:
    """Fetch a stored stream, only if its bytes hash to its name and it verifies; print where it went.

    Nothing is written at the target unless both hold (refused: stream-digest,
    or the stream's own refusal).
    """
    from observe.store import fetch

    try:
        path = fetch(url, out, _key(key))
    except Refusal as exc:
        refuse(exc)
    click.echo(str(path))


COMMANDS: list[click.Command] = [push_cmd, fetch_cmd]
