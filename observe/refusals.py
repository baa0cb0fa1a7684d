"""The refusals of the recorder's tools: artifacts, queries, exports, attestations, stores, keys.

Each is a :class:`aos.refusals.Refusal`, registered by name (docs/REFUSALS.md
lists them); the stream refusals themselves are :mod:`aos.refusals`'. Light:
this module imports nothing but ``aos.refusals`` and ``observe.env``, so a light command can name
a refusal without loading what raises it.
"""

from __future__ import annotations

import os

from aos.refusals import Refusal, StreamWrite
from observe.env import DebugVars

__all__ = [
    "ArtifactMissing",
    "AttestIdentity",
    "AttestPolicy",
    "AttestSubject",
    "IndexDamaged",
    "IndexRow",
    "KeyExists",
    "KeyWrite",
    "MinorBoundTwice",
    "NodesConfig",
    "OutExists",
    "OutputWrite",
    "QuerySQL",
    "QueryStreamId",
    "Resource",
    "SessionSpec",
    "SessionUnsigned",
    "StoreUnreachable",
    "StoreUrl",
    "StreamDigest",
    "debugging",
    "resource_refusal",
]


class ArtifactMissing(Refusal):
    """The stream holds no artifact at that path (or its bytes were omitted)."""

    name = "artifact-missing"


class AttestIdentity(Refusal):
    """``attest`` was given no attester id (a URI the user owns), or one that is not a URI."""

    name = "attest-identity"


class AttestPolicy(Refusal):
    """The gate that sealed the verdict is not held here with the digest the stream names."""

    name = "attest-policy"


class AttestSubject(Refusal):
    """``attest --provenance``/``--test-result``: no captured artifact to name as a subject (or none matches)."""

    name = "attest-subject"


class KeyExists(Refusal):
    """``keygen`` would overwrite a key file that already exists."""

    name = "key-exists"


class KeyWrite(Refusal):
    """``keygen`` cannot write the key pair (a missing folder, no permission, a full disk)."""

    name = "key-write"


class NodesConfig(Refusal):
    """``nodes check`` has no lane config to check: none given and none in the environment, or it cannot be
    read, is not JSON, or names no remote node."""

    name = "nodes-config"


class MinorBoundTwice(Refusal):
    """``nodes check``: the lane config binds one minor of one host to two roles (one GPU cannot be two roles');
    the lane's preflight refuses it by the same name."""

    name = "minor-bound-twice"


class OutExists(StreamWrite):
    """``record`` or ``gate`` was given an ``--out`` that already exists: evidence is never overwritten.

    Refused before the command runs, with exit 2 (the caller's choice, as a usage
    error; never 125, which says the recorder itself failed). A kind of
    ``stream-write`` (the stream cannot be written there), with a name of its own.
    """

    name = "out-exists"


class OutputWrite(Refusal):
    """An export or attestation could not be written to its output file."""

    name = "output-write"


class QuerySQL(Refusal):
    """``query``: SQL that DuckDB does not accept or run here (syntax, names, types, or a file access)."""

    name = "query-sql"


class QueryStreamId(Refusal):
    """``query``: a stream whose stream id another given stream also claims (not merged)."""

    name = "query-stream-id"


class Resource(Refusal):
    """The machine could not give the tool what it needed (a thread, memory, a file descriptor, disk space).

    The tool's own failure, never damage to a stream: the same command may succeed once the
    machine has more (``aos.resources`` says which errors are the machine's).
    """

    name = "resource"


def debugging() -> bool:
    """Whether ``ALPHA_DEBUG=1``: an error is then raised with its traceback, not only named in one line."""
    return os.environ.get(DebugVars.DEBUG, "").strip() == "1"


def resource_refusal(exc: BaseException) -> Resource | None:
    """``resource`` for an error of the machine (``aos.resources.machine_error``), else None."""
    from aos.resources import machine_error

    lacked = machine_error(exc)
    if lacked is None:
        return None
    said = str(exc) or type(exc).__name__
    return Resource(f"{lacked} ({type(exc).__name__}: {said}); the tool's own failure, not the stream's")


class IndexDamaged(Refusal):
    """A file of the evidence index is not that index version's Parquet (damaged, or written by another tool)."""

    name = "index-damaged"


class IndexRow(Refusal):
    """An evidence index row does not state what its stream seals (its verdict, gate, id, head or signer)."""

    name = "index-row"


class StoreUnreachable(Refusal):
    """The store cannot be used: no connection, no credentials, access denied, no such bucket or folder."""

    name = "store-unreachable"


class StoreUrl(Refusal):
    """Not a store this tool knows, or not the URL of a stream in one."""

    name = "store-url"


class StreamDigest(Refusal):
    """The bytes are not the ones their content-addressed name (their BLAKE3) says (raised by the store)."""

    name = "stream-digest"


class SessionSpec(Refusal):
    """A session's expected set (its spec file) is not valid, or a member is started outside a session."""

    name = "session-spec"


class SessionUnsigned(Refusal):
    """A session's spec declares no public key for some member and does not opt in with ``"unsigned": true``: such a
    member's stream would be taken on its self-declared labels alone, so the session is refused before it runs."""

    name = "session-unsigned"
