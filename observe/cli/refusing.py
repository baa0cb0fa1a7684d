"""How the CLI reports a refusal: ``refused: NAME: detail`` on stderr, then exit."""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from aos.refusals import Refusal

__all__ = ["refuse"]


def refuse(exc: Refusal, code: int = 1) -> NoReturn:
    """Print a refusal the one way the CLI prints them, and exit."""
    click.echo(exc.diagnostics(), err=True)
    sys.exit(code)
