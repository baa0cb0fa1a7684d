"""Verifying a session offline, from its folder alone: ``alpha observe session verify DIR``.

The session's own stream is verified first (with ``--key``, its seal and its
checkpoint note must be signed by that key); the checkpoint file must be the
note the stream sealed. Then each member the session sealed as proven is judged
again from its files (observe.session.members: signed by the key the session
declared for it in ``session.open``) and its inclusion proof checked
against the checkpoint; a sub-session is verified the same way, one level
down, its checkpoint bound by its leaf in this one. A member the session
sealed as not run or not proven stays so, with the reason it sealed; a member
proven then and not now (edited, swapped, removed) is named with what fails.
``--member rack-0/node-3`` walks one path only: each level checks only the
member on it, so the work is the fan-out times the depth, not the fleet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos import tlog
from aos.proofs import parse_proof
from aos.refusals import Refusal, StreamProof, StreamSignature
from observe.session import layout
from observe.session.gpus import check_list
from observe.session.members import DID_NOT_RUN, NOT_PROVEN, PROVEN, checkpoint_of, judge, read_session_stream

if TYPE_CHECKING:
    from aos.signing import Verifier
    from observe.session.members import Judged

__all__ = ["MemberReport", "SessionReport", "verify_session"]

#: A member proven when the session sealed, and not now.
CHANGED = "changed-since-sealed"


@dataclass(frozen=True)
class MemberReport:
    """One member: its path from the top (``rack-0/node-3``), kind, status and the reason when not proven.

    ``status`` is ``proven``, ``did-not-run`` or ``not-proven`` as the session sealed it; ``sealed`` False when
    it was proven then and is not now (its files changed since).
    """

    path: str
    kind: str
    status: str
    reason: str | None = None
    sealed: bool = True
    #: The member's stream, verified and matching its leaf (None unless proven).
    stream: Path | None = None
    #: The GPUs the session's expected set gave it (None: not stated).
    gpus: int | None = None
    #: BLAKE3 of the member's stream file, as its leaf states it (None unless proven).
    digest: str | None = None
    #: The id of the key the session declared for it and its stream's seal verified with (None: none declared).
    key_id: str | None = None

    @property
    def unsigned(self) -> bool:
        """Whether it is proven on its self-declared labels alone (the session declared no key for it)."""
        return self.status == PROVEN and self.key_id is None


@dataclass
class SessionReport:
    """The top session's origin and checkpoint, whether its note's signature was checked, and every member."""

    origin: str
    size: int
    root: str
    signed: bool
    members: list[MemberReport] = field(default_factory=list)

    @property
    def not_proven(self) -> list[MemberReport]:
        """Return every member that did not run or is not proven, at any depth."""
        return [m for m in self.members if m.status != PROVEN]

    @property
    def unsigned(self) -> list[MemberReport]:
        """Return every member proven on its labels alone: its session declared no key for it."""
        return [m for m in self.members if m.unsigned]

    @property
    def exit_code(self) -> int:
        """0 every member proven by its declared key; 3 only members the session itself sealed as not run or
        not proven, or members without a key; 1 a member proven when the session sealed and not now."""
        if any(not m.sealed for m in self.members):
            return 1
        return 3 if self.not_proven or self.unsigned else 0


def verify_session(directory: Path, key: Verifier | None = None, only: str | None = None) -> SessionReport:
    """Verify the session in ``directory``; raise the ``Refusal`` of its own stream or checkpoint when they fail.

    ``only`` (``NAME/NAME/...``) restricts the walk to the members on that path.
    """
    s = read_session_stream(layout.stream(directory), key)
    if s.opened is None or s.checkpoint is None:
        raise StreamProof(f"{layout.stream(directory)} is sealed but is not a session (no session.checkpoint)")
    cp = checkpoint_of(s.checkpoint)
    _check_note(directory, s.checkpoint, cp, key)
    bad = check_list(directory, s.checkpoint.get("gpus"))
    if bad is not None:
        raise StreamProof(f"{directory}: {bad}")
    report = SessionReport(cp.origin, cp.size, s.checkpoint["root"], key is not None)
    parts = _parts(only)
    _walk(directory, cp, s.members, s.checkpoint, _declared(s.opened), "", parts, report)
    if parts is not None and (not report.members or report.members[-1].path != "/".join(parts)):
        raise StreamProof(f"the session has no member {'/'.join(parts)!r} (a path is NAME/NAME/...)")
    return report


def _declared(opened: dict[str, Any] | None) -> dict[str, tuple[int | None, str | None]]:
    """Each expected member's GPU count and public key (raw, hex), as ``session.open`` declared them."""
    members = (opened or {}).get("members") or []
    return {str(m.get("name")): (m.get("gpus"), m.get("key")) for m in members if isinstance(m, dict)}


def _parts(only: str | None) -> list[str] | None:
    return None if only is None else [p for p in only.split("/") if p]


def _check_note(directory: Path, sealed: dict[str, object], cp: tlog.Checkpoint, key: Verifier | None) -> None:
    """The checkpoint file is the note the stream sealed; with ``key``, a note signed by it under the origin."""
    try:
        note = layout.checkpoint(directory).read_bytes()
    except OSError as exc:
        raise StreamProof(f"{layout.checkpoint(directory)}: {exc.strerror or exc}") from None
    if note != str(sealed.get("note", "")).encode("utf-8", "surrogateescape"):
        raise StreamProof(f"{layout.checkpoint(directory)} is not the checkpoint note the session sealed")
    if key is None:
        text = note.split(b"\n\n", 1)[0] + b"\n" if b"\n\n" in note else note
    else:
        from cryptography.hazmat.primitives import serialization

        raw = key.public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        if b"\n\n" not in note:
            raise StreamSignature(f"{layout.checkpoint(directory)} is not signed, and a key was given")
        text = tlog.open_note(note, cp.origin, raw)
    if tlog.parse_checkpoint(text) != cp:
        raise StreamProof(f"{layout.checkpoint(directory)} states another tree than the session sealed")


def _walk(
    directory: Path,
    cp: tlog.Checkpoint,
    members: list[dict[str, object]],
    sealed_cp: dict[str, object],
    declared: dict[str, tuple[int | None, str | None]],  # each member's GPUs and key, in the declared order
    prefix: str,
    only: list[str] | None,
    report: SessionReport,
) -> None:
    """Report each member of one session level (only the one on the path when ``only`` is given)."""
    leaves = list(sealed_cp.get("leaves") or [])  # type: ignore[call-overload]
    latest: dict[str, dict[str, object]] = {}  # a member taken as it sealed and judged again at the end: the last
    for attrs in members:
        latest[str(attrs.get("name"))] = attrs
    order = [n for n in declared if n in latest] + [n for n in latest if n not in declared]  # the declared order
    for attrs in (latest[n] for n in order):
        name, kind, status = str(attrs.get("name")), str(attrs.get("kind")), str(attrs.get("status"))
        if only is not None and (not only or only[0] != name):
            continue
        path = prefix + name
        expected, key = declared.get(name, (None, None))
        if status != PROVEN:
            report.members.append(MemberReport(path, kind, status, str(attrs.get("reason")), gpus=expected))
            continue
        problem, key_id = _member_problem(directory, cp, attrs, leaves, key)
        if problem is not None:
            report.members.append(MemberReport(path, kind, NOT_PROVEN, problem, sealed=False, gpus=expected))
            continue
        digest = str(attrs.get("file_blake3"))
        if kind != "session":
            stream = layout.node_stream(directory, name)
            report.members.append(
                MemberReport(path, kind, PROVEN, stream=stream, gpus=expected, digest=digest, key_id=key_id)
            )
            continue
        sub = layout.sub_session(directory, name)
        try:
            s = read_session_stream(layout.stream(sub))
            sub_cp = checkpoint_of(s.checkpoint or {})
        except Refusal as exc:  # judged proven a moment ago: only a change under our feet gets here
            report.members.append(MemberReport(path, kind, NOT_PROVEN, str(exc), sealed=False))
            continue
        report.members.append(MemberReport(path, kind, PROVEN, stream=layout.stream(sub), digest=digest, key_id=key_id))
        if only is not None and len(only) == 1:
            continue  # the path ends at this sub-session
        rest = None if only is None else only[1:]
        _walk(sub, sub_cp, s.members, s.checkpoint or {}, _declared(s.opened), path + "/", rest, report)


def _member_problem(
    directory: Path, cp: tlog.Checkpoint, attrs: dict[str, object], leaves: list[object], key: str | None
) -> tuple[str | None, str | None]:
    """Why a member the session sealed as proven is not proven now (None: it is), and the id of the declared key
    its stream verified with (None: none declared)."""
    name, kind = str(attrs.get("name")), str(attrs.get("kind"))
    now = judge(directory, name, kind, cp.origin, key)
    return _leaf_problem(directory, cp, attrs, leaves, now), now.key_id


def _leaf_problem(
    directory: Path, cp: tlog.Checkpoint, attrs: dict[str, object], leaves: list[object], now: Judged
) -> str | None:
    """Why member ``now`` (judged again from its files) does not match its sealed leaf and proof (None: it does)."""
    name, kind = now.name, now.kind
    if now.member is None:
        return f"{now.status if now.status == DID_NOT_RUN else 'not proven'} now: {now.reason}"
    if now.member.leaf_hash().hex() != attrs.get("leaf"):
        return (
            f"{layout.member_stream(directory, name, kind).relative_to(directory)} is not the stream the session "
            "sealed: its leaf differs from the sealed one"
        )
    if name not in leaves:
        return "the session's checkpoint has no leaf of it"
    try:
        proof = parse_proof(layout.proof(directory, name).read_bytes())
    except OSError as exc:
        return f"its proof {layout.proof(directory, name).relative_to(directory)}: {exc.strerror or exc}"
    except Refusal as exc:
        return f"its proof: {exc}"
    if proof.index != leaves.index(name):
        return f"its proof is for leaf {proof.index}, the session sealed it as leaf {leaves.index(name)}"
    try:
        proof.check(now.member, cp)
    except Refusal as exc:
        return str(exc)
    return None
