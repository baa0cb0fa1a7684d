"""How an ``alpha`` command is written: its example, its refusals, and the options commands share.

Every command module imports this one and no other command module. A command is
written the same way everywhere (``observe`` and ``tracker`` alike)::

    @example("alpha observe verify run.aos --key ci.pub")
    @click.command("verify")
    @click.argument("stream", type=STREAM)
    @public_key_option("Ed25519 public key (PEM) the seal must be signed by.")
    @reports_refusals()
    def verify_command(stream: Path, key: str | None) -> None: ...

``example`` goes above the click decorator (it fills the command's epilog, once);
``reports_refusals`` goes right above the function, so a refusal raised anywhere in
its body is printed as ``refused: NAME: detail`` and exits with the command's code.
Functions are named ``<words of the command>_command`` (``<words>_group`` for a group).
Importing this module loads click and ``aos.refusals`` only: the key loaders import
``aos.signing`` (cryptography) when a key is given.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from aos.refusals import Refusal
from observe.cli.recording import CommandAfterOptions, options_from_click, recording_options, without_numpy
from observe.exits import Exit

if TYPE_CHECKING:
    from aos.signing import Signer, Verifier

__all__ = [
    "STREAM",
    "CommandAfterOptions",
    "Exit",
    "example",
    "gate_file_option",
    "json_option",
    "options_from_click",
    "private_key",
    "public_key",
    "public_key_option",
    "recording_options",
    "reports_refusals",
    "without_numpy",
]

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=click.Command)

#: A stream argument is any path: what is not a regular file is refused as stream-missing, not a usage error.
STREAM = click.Path(path_type=Path)


def example(*lines: str) -> Callable[[C], C]:
    """Return a decorator that ends the command's ``--help`` with these example command lines.

    It goes above ``@click.command`` (or ``@group.command``), beside the command it
    shows. A command has one example block: a second one raises ``ValueError``.
    """

    def attach(command: C) -> C:
        if not isinstance(command, click.Command):
            raise TypeError("@example goes above the @click.command decorator")
        if command.epilog:
            raise ValueError(f"command {command.name!r} already has an example")
        command.epilog = "Example:\n\n\b\n" + "\n".join(f"  {line}" for line in lines)
        return command

    return attach


def reports_refusals(
    exit: Exit = Exit.FAIL,
    *,
    by_name: Mapping[str, Exit] | None = None,
    translate: Callable[[Exception], Refusal | None] | None = None,
) -> Callable[[F], F]:
    """Return a decorator that prints a refusal the one way the CLI prints them and exits.

    A refusal raised by the command is printed as ``refused: NAME: detail`` on stderr;
    the exit code is ``by_name[NAME]`` where the refusal's name is listed, else
    ``exit``. ``translate`` turns any other exception into a refusal (the tracker's
    database errors) or returns None to let it through.
    """
    codes = dict(by_name or {})

    def report(exc: Refusal) -> None:
        click.echo(exc.diagnostics(), err=True)
        sys.exit(codes.get(exc.name, exit))

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Refusal as exc:
                report(exc)
            except Exception as exc:
                refusal = translate(exc) if translate is not None else None
                if refusal is None:
                    raise
                report(refusal)

        return wrapper  # type: ignore[return-value]

    return decorate


def public_key_option(help_text: str) -> Callable[[F], F]:
    """``--key PUBKEY``: the Ed25519 public key (PEM) a stream's seal is checked against.

    The command receives the path (``key``) and loads it with :func:`public_key` where
    its refusal belongs in the order of its checks.
    """
    return click.option("--key", "key", type=click.Path(dir_okay=False), default=None, metavar="PUBKEY", help=help_text)


def public_key(path: str | Path | None) -> Verifier | None:
    """Load the Ed25519 public key at ``path`` (None for none); a bad one is refused as ``stream-signature``."""
    if path is None:
        return None
    from aos.signing import load_public_key

    return load_public_key(path)


def private_key(path: str | Path | None) -> Signer | None:
    """Load the Ed25519 private key at ``path`` (None for none); a bad one is refused as ``stream-signature``."""
    if path is None:
        return None
    from aos.signing import load_signer

    return load_signer(path)


def gate_file_option(help_text: str) -> Callable[[F], F]:
    """``--gate-file FILE`` (repeatable, ``gate_files``), as every command that resolves gates takes it."""
    return click.option(
        "--gate-file",
        "gate_files",
        multiple=True,
        type=click.Path(dir_okay=False, path_type=Path),
        metavar="FILE",
        help=help_text,
    )


def json_option(help_text: str) -> Callable[[F], F]:
    """``--json`` (``as_json``): print one JSON document instead of text."""
    return click.option("--json", "as_json", is_flag=True, default=False, help=help_text)
