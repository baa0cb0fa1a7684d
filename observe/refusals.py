"""The refusals of ``observe`` that belong to no stream: each a named :class:`aos.refusals.Refusal`.

Printed by the command line as ``refused: NAME: detail`` (exit 1); the names are a
contract, listed in the docs' refusal table.
"""

from __future__ import annotations

from aos.refusals import Refusal, StreamWrite

__all__ = ["KeyExists", "KeyWrite", "OutExists"]


class KeyExists(Refusal):
    """``keygen`` would overwrite a key file that already exists."""

    name = "key-exists"


class KeyWrite(Refusal):
    """``keygen`` cannot write the key pair (a missing folder, no permission, a full disk)."""

    name = "key-write"


class OutExists(StreamWrite):
    """``record`` or ``gate`` was given an ``--out`` that already exists: evidence is never overwritten.

    Refused before the command runs, with exit 2 (the caller's choice, as a usage
    error; never 125, which says the recorder itself failed). A kind of
    ``stream-write`` (the stream cannot be written there), with a name of its own.
    """

    name = "out-exists"
