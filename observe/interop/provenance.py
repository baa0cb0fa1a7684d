"""SLSA provenance v1 of a recorded command: what the recorder saw it build, and from what.

Every field comes from the verified stream, never from the disk or the command's
word: the subjects are the files the recorder captured (``artifact`` events whose
bytes hash to the recorded SHA-256, or whose digest the recorder took itself when
it omitted the bytes), so a receipt naming a file the recorder never captured
names no subject, and a file edited after its capture no longer matches its
subject. ``buildDefinition`` holds the command's argv and gate
(``externalParameters``), the environment policy (``internalParameters``: which
variables' values were recorded, how many were not) and the ``source`` the
recorder read from git before the command ran (``resolvedDependencies``, with the
lane configs the recorder captured itself). ``runDetails`` names the builder by
the attester id the user gives, the stream's id and times, and the stream file
itself as the byproduct. No field carries the runner's absolute paths: the
working directory is left out, a capture outside it is named by its file name,
and a source remote that is a local path gives no ``uri``.

docs/CI.md ("Provenance and test results") is the reference.
"""

from __future__ import annotations

import datetime
import os
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aos import kinds
from observe.interop.identity import BUILD_TYPE, Identity
from observe.refusals import AttestSubject

if TYPE_CHECKING:
    from aos.event import Event
    from aos.signing import Signer, Verifier
    from gates.evidence import Artifact, Evidence
    from observe.interop.envelope import Attestation
    from observe.interop.verified import VerifiedStream

__all__ = [
    "PREDICATE_TYPE",
    "Subject",
    "attest_provenance",
    "build_definition",
    "hashed_captures",
    "provenance_predicate",
    "run_details",
    "sha256sum_lines",
    "subject_name",
    "subjects",
    "without_chunk_bytes",
]

PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
#: A remote that is a URL (``scheme://``) or scp-like (``user@host:path``); anything else (and ``file:``) is
#: a local path.
_REMOTE_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+|[^\s/@:]+@[^\s/:]+:\S+")


@dataclass(frozen=True)
class Subject:
    """One captured file as a subject: its name in the statement, its digests, the capture it comes from."""

    name: str
    digest: dict[str, str]
    path: str  # as the stream recorded it
    seq: int

    def descriptor(self) -> dict[str, Any]:
        """Return the in-toto ResourceDescriptor: ``{"name", "digest"}``."""
        return {"name": self.name, "digest": dict(self.digest)}


def subject_name(path: str) -> str:
    """Return the subject name of a recorded path: as recorded when relative, the file name when absolute."""
    return posixpath.basename(path) if path.startswith("/") else path


def _blake3(art: Artifact) -> str | None:
    value = art.event.attrs.get("blake3")
    return value.lower() if isinstance(value, str) and re.fullmatch(r"[0-9a-fA-F]{64}", value) else None


#: How a capture's SHA-256 is established: the digest, or None and why (``gates.evidence.Artifact.sha256``'s contract).
Digest = Callable[["Artifact"], tuple[str | None, str]]


def _from_content(art: Artifact) -> tuple[str | None, str]:
    return art.sha256()


def subjects(
    ev: Evidence,
    patterns: Sequence[str] = (),
    digests: Sequence[str] = ("sha256",),
    sha256: Digest = _from_content,
) -> tuple[list[Subject], list[str]]:
    """Return the files the recorder captured, as subjects, and a note for each capture left out.

    Only the command's captures of regular files count (the recorder's own
    captures of a lane config are inputs, a rebuild's are ``rebuild``'s); a
    capture whose bytes do not hash to its recorded SHA-256 is left out, named.
    ``patterns``: globs over the recorded path (``gates.evidence.glob_match``);
    none means every capture. A path captured twice is named once, by its last
    capture. ``sha256``: how a capture's digest is established (default: from the
    bytes ``ev`` holds; ``hashed_captures`` when ``ev`` was built without them).
    """
    from gates.evidence import glob_match

    by_path: dict[str, Subject] = {}
    notes: list[str] = []
    for art in ev.artifacts:
        if art.origin == "recorder":
            continue
        if patterns and not any(glob_match(p, art.path) for p in patterns):
            continue
        kind = art.event.attrs.get("kind", "file")
        if kind != "file":
            notes.append(f"{art.path} (seq {art.event.seq}): captured as {kind!r}, not a file: not a subject")
            continue
        sha, how = sha256(art)
        if sha is None:
            notes.append(f"{art.path} (seq {art.event.seq}): {how}: not a subject")
            continue
        digest = {"sha256": sha}
        if "blake3" in digests:
            b3 = _blake3(art)
            if b3 is None:
                notes.append(f"{art.path} (seq {art.event.seq}): no recorded blake3: sha256 only")
            else:
                digest["blake3"] = b3
        earlier = by_path.pop(art.path, None)
        if earlier is not None and earlier.digest["sha256"] != sha:
            notes.append(f"{art.path}: captured again (seq {art.event.seq}); the last capture is the subject")
        by_path[art.path] = Subject(subject_name(art.path), digest, art.path, art.event.seq)
    return list(by_path.values()), notes


def without_chunk_bytes(events: Iterable[Event]) -> Iterator[Event]:
    """Return ``events`` with every ``artifact.chunk``'s bytes left out (its seq, step and offset kept), so an
    index of them holds no captured file; ``hashed_captures`` hashes those bytes in a second pass."""
    from aos.event import Event

    for e in events:
        if e.kind == kinds.ARTIFACT_CHUNK and e.data is not None:
            yield Event(e.seq, e.wall_ns, e.mono_ns, e.kind, e.step, e.attrs_json, None, e.hash)
        else:
            yield e


def hashed_captures(stream: VerifiedStream, arts: Iterable[Artifact]) -> Digest:
    """Return how the SHA-256 of each of ``arts`` is established, hashing their chunks' bytes in one more pass
    over ``stream``, a chunk at a time (never a whole file in memory).

    The rule is ``Artifact.sha256``'s: inline bytes must be whole (each chunk
    starting where the last ended, as many bytes as the ``size``) and hash to the
    digest the ``artifact`` event states; omitted bytes fall back on that digest.
    """
    import hashlib

    owner: dict[int, int] = {}  # chunk seq -> its artifact's seq
    state: dict[int, list[Any]] = {}  # artifact seq -> [hasher, bytes so far, whole so far]
    for art in arts:
        state[art.event.seq] = [hashlib.sha256(), 0, True]
        owner.update((c.seq, art.event.seq) for c in art.chunks)
    for e in stream.events():
        seq = owner.get(e.seq)
        if seq is None:
            continue
        st = state[seq]
        offset = e.attrs.get("offset")
        if not st[2] or type(offset) is not int or offset != st[1]:
            st[2] = False
            continue
        st[0].update(e.data or b"")
        st[1] += len(e.data or b"")

    def digest(art: Artifact) -> tuple[str | None, str]:
        recorded = art.recorded_sha256
        if not art.inline:
            if recorded is not None:
                return recorded, "the recorder's digest (content omitted)"
            return None, "its captured bytes are incomplete"
        hasher, size, whole = state[art.event.seq]
        if not whole or (art.size is not None and art.size != size):
            return None, "its captured bytes are incomplete"
        actual: str = hasher.hexdigest()
        if recorded is not None and recorded != actual:
            return None, f"its captured bytes hash to {actual} but the artifact event says {recorded}"
        return actual, "hashed from the captured bytes"

    return digest


def sha256sum_lines(descriptors: Iterable[dict[str, Any]]) -> bytes:
    """Return the subjects in ``sha256sum``'s format, ``HEX  NAME`` a line (what
    ``actions/attest-build-provenance``'s ``subject-checksums`` reads).

    A name holding a newline or a backslash is escaped as GNU ``sha256sum`` does:
    the line starts with ``\\`` and those characters are written ``\\n`` and ``\\\\``.
    """
    lines = []
    for d in descriptors:
        name = str(d["name"])
        escaped = name.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
        lines.append(("\\" if escaped != name else "") + f"{d['digest']['sha256']}  {escaped}\n")
    return "".join(lines).encode("utf-8", "surrogateescape")


def _time(ev: Event | None) -> str | None:
    from observe.interop.envelope import rfc3339

    if ev is None:
        return None
    return rfc3339(datetime.datetime.fromtimestamp(ev.wall_ns / 1e9, datetime.UTC))


def _source_dependency(source: Any) -> dict[str, Any] | None:
    """The recorded ``source`` as a ResourceDescriptor: the commit the recorder read (None without one)."""
    from observe.interop.verified import display

    if not isinstance(source, dict) or "error" in source or not isinstance(source.get("commit"), str):
        return None
    dep: dict[str, Any] = {"name": "source", "digest": {"gitCommit": source["commit"]}}
    remote = display(source["remote"]) if source.get("remote") else None
    if remote is not None and _REMOTE_URL.fullmatch(remote) and not remote.lower().startswith("file:"):
        branch = display(source["branch"]) if source.get("branch") is not None else None
        dep["uri"] = f"git+{remote}" + (f"@refs/heads/{branch}" if branch else "")
    annotations: dict[str, Any] = {"dirty": bool(source.get("dirty"))}
    if source.get("tree") is not None:
        annotations["tree"] = display(source["tree"])
    changes = source.get("changes")
    if isinstance(changes, dict) and isinstance(changes.get("diff_sha256"), str):
        annotations["diff_sha256"] = changes["diff_sha256"]
    dep["annotations"] = annotations
    return dep


def _lane_configs(ev: Evidence, sha256: Digest) -> list[dict[str, Any]]:
    """The lane configs the recorder captured itself, as ResourceDescriptors (inputs of the run)."""
    out = []
    for art in ev.artifacts:
        if art.origin != "recorder":
            continue
        sha, _ = sha256(art)
        if sha is None:
            continue
        dep: dict[str, Any] = {"name": subject_name(art.path), "digest": {"sha256": sha}}
        if isinstance(art.event.attrs.get("env"), str):
            dep["annotations"] = {"env": art.event.attrs["env"]}
        out.append(dep)
    return out


def _environment(env: Any) -> dict[str, Any]:
    """The environment policy as recorded: which variables' values were kept, how many were not."""
    from observe.secrets.envpolicy import NOT_RECORDED

    recorded = env if isinstance(env, dict) else {}
    kept = sorted(k for k, v in recorded.items() if isinstance(k, str) and v != NOT_RECORDED)
    return {"recorded": kept, "not_recorded": sum(1 for v in recorded.values() if v == NOT_RECORDED)}


def build_definition(
    opened: dict[str, Any], ev: Evidence, gate: dict[str, Any] | None, sha256: Digest = _from_content
) -> dict[str, Any]:
    """Return ``buildDefinition``: the command, its gate, the environment policy and the source."""
    from observe.interop.verified import argv_of

    external: dict[str, Any] = {"argv": argv_of(opened.get("argv"))}
    if gate is not None:
        external["gate"] = gate
    deps = [d for d in [_source_dependency(opened.get("source"))] if d is not None]
    deps += _lane_configs(ev, sha256)
    return {
        "buildType": BUILD_TYPE,
        "externalParameters": external,
        "internalParameters": {"environment": _environment(opened.get("env"))},
        "resolvedDependencies": deps,
    }


def run_details(
    stream: VerifiedStream, opened: dict[str, Any], builder_id: str, digests: Sequence[str]
) -> dict[str, Any]:
    """Return ``runDetails``: the builder, the stream's id and times, the stream file as byproduct."""
    from observe.interop.attest import digests_of

    first: dict[str, Event | None] = {kinds.PROCESS_START: None, kinds.PROCESS_EXIT: None}
    opened_ev: Event | None = None
    for e in stream.events():
        if e.kind == kinds.STREAM_OPEN and opened_ev is None:
            opened_ev = e
        if e.kind in first and first[e.kind] is None:
            first[e.kind] = e
    metadata: dict[str, Any] = {"invocationId": stream.stream_id}
    started = _time(first[kinds.PROCESS_START] or opened_ev)
    finished = _time(first[kinds.PROCESS_EXIT])
    if started is not None:
        metadata["startedOn"] = started
    if finished is not None:
        metadata["finishedOn"] = finished
    version = opened.get("version")
    builder: dict[str, Any] = {"id": builder_id}
    if isinstance(version, str):
        builder["version"] = {"alpha-observe": version}
    stream_file = {
        "name": stream.path.name,
        "digest": digests_of(stream.data, digests, stream.verification.file_blake3),
        "mediaType": "application/vnd.apache.arrow.stream",
    }
    return {"builder": builder, "metadata": metadata, "byproducts": [stream_file]}


def provenance_predicate(
    stream: VerifiedStream,
    ev: Evidence,
    builder_id: str,
    gate: dict[str, Any] | None,
    digests: Sequence[str],
    sha256: Digest = _from_content,
) -> dict[str, Any]:
    """Return the SLSA provenance v1 predicate of the verified ``stream`` (indexed as ``ev``)."""
    opened = ev.open.attrs if ev.open is not None else {}
    return {
        "buildDefinition": build_definition(opened, ev, gate, sha256),
        "runDetails": run_details(stream, opened, builder_id, digests),
    }


def attest_provenance(
    path: str | os.PathLike[str],
    *,
    identity: Identity,
    signer: Signer | None = None,
    seal_key: Verifier | None = None,
    patterns: Sequence[str] = (),
    digests: Sequence[str] = ("sha256",),
) -> tuple[Attestation, list[Subject]]:
    """Verify the stream at ``path`` and make the envelope of its provenance, and its subjects.

    ``attest-identity`` without an attester id; ``attest-subject`` when the
    recorder captured no file ``patterns`` match.
    """
    from gates.evidence import Evidence
    from observe.interop.attest import seal_notes, verified
    from observe.interop.envelope import STATEMENT_TYPE, envelope

    builder_id = identity.attester()
    stream = verified(path, signer, seal_key)
    ev = Evidence(without_chunk_bytes(stream.events()), keep_output=False)
    sha256 = hashed_captures(stream, ev.artifacts)
    found, notes = subjects(ev, patterns, digests, sha256)
    if not found:
        which = f" matching {', '.join(repr(p) for p in patterns)}" if patterns else ""
        raise AttestSubject(
            f"{stream.path}: the recorder captured no file{which} (capture build outputs with --artifact GLOB)"
        )
    sealed = stream.verification.verdict
    gate: dict[str, Any] | None = None
    if sealed is not None and isinstance(sealed.get("gate"), str):
        gate = {"name": sealed["gate"]}
        if isinstance(sealed.get("gate_sha256"), str):
            gate["digest"] = {"sha256": sealed["gate_sha256"]}
    elif ev.open is not None and isinstance(ev.open.attrs.get("gate"), str):
        gate = {"name": ev.open.attrs["gate"]}
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [s.descriptor() for s in found],
        "predicateType": PREDICATE_TYPE,
        "predicate": provenance_predicate(stream, ev, builder_id, gate, digests, sha256),
    }
    said = [f"{stream.path}: provenance of {len(found)} captured file(s) for builder {builder_id}"]
    said += notes + seal_notes(stream.verification, signer)
    return envelope(statement, signer, gate=None, notes=said), found
