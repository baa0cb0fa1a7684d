"""Judging one member of a session from its files: proven, did not run, or not proven (and why).

A member is proven when its stream lies where the session's folder puts it,
verifies (intact and sealed) with its seal signed by the public key the
session declared for that member (``session.open``), and names this session
and this member in its ``stream.open`` labels (``aos.session.origin``, ``aos.session.member``), so a
stream of another session, or of another member, is never taken for it. A
sub-session's stream must also hold its ``session.checkpoint``: its leaf
states that checkpoint; and its GPU list must be the one it sealed. The
labels alone are self-declared (whoever can write into the folder can write
them); the declared key is what shows the stream came from
that member's recorder. A member the session declared without a key (its
spec's ``"unsigned": true``) is judged on its labels alone and marked so
(``Judged.key_id`` None): every verdict over it is at best inconclusive. The
same judgment serves the coordinator when it seals and ``verify --session``
afterwards.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos import kinds, tlog
from aos.proofs import Member
from aos.refusals import Refusal
from observe.session import layout

if TYPE_CHECKING:
    from aos.signing import Verifier

__all__ = [
    "DID_NOT_RUN",
    "LABEL_MEMBER",
    "LABEL_ORIGIN",
    "NOT_PROVEN",
    "PROVEN",
    "Judged",
    "SessionStream",
    "judge",
    "member_attrs",
    "read_session_stream",
]

PROVEN = "proven"
DID_NOT_RUN = "did-not-run"
NOT_PROVEN = "not-proven"
#: The ``stream.open`` labels that bind a member's stream to its session and its name.
LABEL_ORIGIN = "aos.session.origin"
LABEL_MEMBER = "aos.session.member"


@dataclass(frozen=True)
class Judged:
    """One member as its files show it: ``member`` (its leaf) when proven, else the reason; ``key_id`` the id of
    the key its stream's seal was checked against (None: the session declared no key for it)."""

    name: str
    kind: str
    status: str
    reason: str | None = None
    member: Member | None = None
    key_id: str | None = None


@dataclass(frozen=True)
class SessionStream:
    """What a verified session stream holds: its labels, ``session.open``, its members and its checkpoint."""

    stream_id: str
    file_blake3: str
    head: str
    labels: dict[str, Any]
    opened: dict[str, Any] | None
    members: list[dict[str, Any]]
    checkpoint: dict[str, Any] | None


def read_session_stream(path: Path, key: Verifier | None = None, *, whole: bool = True) -> SessionStream:
    """Verify the stream at ``path`` and return its session events; raise the stream's ``Refusal``.

    The stream is verified as ``verify`` does (mapped, batch by batch: memory does not follow its size), then
    read again for its events: all of them (a session's stream: its members are at most the fan-out), or with
    ``whole`` False only its ``stream.open`` (a node's stream, however long it ran). A file that changed between
    the two reads is refused (``stream-seal``): its stream id or first hash would not be the verified ones.
    """
    from aos.reader import StreamFile
    from aos.refusals import StreamSeal
    from aos.verify import verify_stream

    v = verify_stream(path, key)
    labels: dict[str, Any] = {}
    opened: dict[str, Any] | None = None
    members: list[dict[str, Any]] = []
    checkpoint: dict[str, Any] | None = None
    last = b""
    with StreamFile(path) as f:
        if f.stream_id != v.stream_id:
            raise StreamSeal(f"{path} changed while it was read")
        for ev in f.events():
            last = ev.hash
            if ev.kind == kinds.STREAM_OPEN:
                labels = dict(ev.attrs.get("labels") or {})
                if not whole:
                    break
            elif ev.kind == kinds.SESSION_OPEN and opened is None:
                opened = ev.attrs
            elif ev.kind == kinds.SESSION_MEMBER:
                members.append(ev.attrs)
            elif ev.kind == kinds.SESSION_CHECKPOINT and checkpoint is None:
                checkpoint = ev.attrs
    if whole and last.hex() != v.head:
        raise StreamSeal(f"{path} changed while it was read")
    return SessionStream(v.stream_id, v.file_blake3, v.head, labels, opened, members, checkpoint)


def checkpoint_of(attrs: dict[str, Any]) -> tlog.Checkpoint:
    """Return the checkpoint a ``session.checkpoint`` event states (``StreamProof`` when it is not one)."""
    from aos.refusals import StreamProof

    try:
        return tlog.parse_checkpoint(
            f"{attrs['origin']}\n{attrs['size']}\n{attrs['root']}\n".encode("utf-8", "surrogateescape")
        )
    except (KeyError, TypeError):
        raise StreamProof("the session.checkpoint event lacks origin, size or root") from None


def judge(directory: Path, name: str, kind: str, origin: str, key: str | None) -> Judged:
    """Judge member ``name`` (``kind`` ``stream`` or ``session``) of the session ``origin`` in ``directory``;
    ``key`` is the raw public key (hex) the session declared for it, None when it declared none."""
    from aos.refusals import StreamSignature
    from aos.signing import verifier_from_raw

    verifier: Verifier | None = None
    if key is not None:
        try:
            verifier = verifier_from_raw(key)
        except Refusal as exc:
            return Judged(name, kind, NOT_PROVEN, f"the key the session declared for it: {exc}")
    path = layout.member_stream(directory, name, kind)
    where = os.path.relpath(path, directory)
    if not path.exists():
        partial = layout.node_partial(directory, name) if kind == "stream" else layout.stream_partial(path.parent)
        if partial.exists():  # its recorder began and never sealed
            try:
                read_session_stream(partial, whole=False)
            except Refusal as exc:
                return Judged(name, kind, NOT_PROVEN, f"it never sealed: {os.path.relpath(partial, directory)}: {exc}")
            return Judged(name, kind, NOT_PROVEN, f"it sealed {os.path.relpath(partial, directory)} but never named it")
        return Judged(name, kind, DID_NOT_RUN, f"no stream at {where}: it never sealed one, or it never arrived")
    try:
        got = read_session_stream(path, verifier, whole=kind == "session")
    except StreamSignature as exc:
        if verifier is None:
            return Judged(name, kind, NOT_PROVEN, f"{where}: {exc}")
        return Judged(
            name,
            kind,
            NOT_PROVEN,
            f"{where} is not signed by the key the session declared for {name} ({verifier.key_id}): {exc}",
        )
    except Refusal as exc:
        return Judged(name, kind, NOT_PROVEN, f"{where}: {exc}")
    said = (got.labels.get(LABEL_ORIGIN), got.labels.get(LABEL_MEMBER))
    if said != (origin, name):
        return Judged(
            name,
            kind,
            NOT_PROVEN,
            f"{where} is not this member's stream: it names session {said[0]!r}, member {said[1]!r}",
        )
    cp: tlog.Checkpoint | None = None
    if kind == "session":
        if got.checkpoint is None:
            return Judged(name, kind, NOT_PROVEN, f"{where} is sealed but holds no session.checkpoint")
        try:
            cp = checkpoint_of(got.checkpoint)
        except Refusal as exc:
            return Judged(name, kind, NOT_PROVEN, f"{where}: {exc}")
        from observe.session.gpus import check_list

        bad = check_list(path.parent, got.checkpoint.get("gpus"))
        if bad is not None:
            return Judged(name, kind, NOT_PROVEN, f"{os.path.relpath(path.parent, directory)}/{bad}")
    member = Member(kind, name, got.stream_id, got.file_blake3, got.head, cp)
    return Judged(name, kind, PROVEN, None, member, None if verifier is None else verifier.key_id)


def member_attrs(j: Judged, at: str) -> dict[str, Any]:
    """Return the ``session.member`` attrs of ``j``; ``at`` is ``sealed`` (taken as the member sealed, while
    the launcher ran) or ``end`` (judged when the launcher had ended)."""
    import time

    attrs: dict[str, Any] = {"name": j.name, "kind": j.kind, "status": j.status, "reason": j.reason, "at": at}
    if j.member is not None:
        attrs.update(
            stream_id=j.member.stream_id,
            file_blake3=j.member.file_blake3,
            head=j.member.head,
            leaf=j.member.leaf_hash().hex(),
        )
    attrs["received_ns"] = time.time_ns()
    return attrs
