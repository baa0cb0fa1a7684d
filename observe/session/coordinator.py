"""The coordinating recording of a session: it declares the expected set, takes each member's sealed stream,
and seals a checkpoint over them all.

    outcome = run_session(read_spec("fleet.json"), Path("run-7"), ["./launch.sh"], RecordOptions())

The launcher (the recorded command) starts a node recorder on each node
(``alpha observe node NAME -- CMD``, over SSH, ``srun`` or a DaemonSet) and,
for a nested fleet, a sub-session per rack (``alpha observe session run``);
each seals its own stream into the session's folder (``ALPHA_FLEET_DIR``).
Its stream holds, after ``stream.open``, ``session.open`` (the origin and the
expected members, each with the public key its stream must be signed with);
then, when the launcher has ended, one ``session.member``
per expected member, in the declared order, judged from its files
(observe.session.members: proven, did not run, not proven); then
``session.checkpoint``: the RFC 9162 tree over the proven members' leaves, in
that order, as a C2SP checkpoint, signed as a note by the recording's own key
when it has one. Each proven member's inclusion proof is written to
``proofs/NAME.proof`` (docs/FORMAT.md section 9).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos import kinds

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from aos.writer import StreamWriter
    from observe.recorder.recording import RecordOptions, RecordResult
    from observe.session.members import Judged
    from observe.session.spec import Spec

__all__ = ["Parent", "SessionOutcome", "open_attrs", "run_session", "seal_members"]


@dataclass(frozen=True)
class Parent:
    """The session this one is a member of: its origin, and this session's name among its members."""

    origin: str
    name: str


@dataclass(frozen=True)
class SessionOutcome:
    """The recording, the session's origin and its members as judged when it sealed."""

    record: RecordResult
    origin: str
    judged: tuple[Judged, ...]

    @property
    def missing(self) -> tuple[Judged, ...]:
        """Return the members that did not run or are not proven."""
        from observe.session.members import PROVEN

        return tuple(j for j in self.judged if j.status != PROVEN)

    @property
    def unsigned(self) -> tuple[Judged, ...]:
        """Return the members proven on their labels alone: the spec declared no key for them."""
        from observe.session.members import PROVEN

        return tuple(j for j in self.judged if j.status == PROVEN and j.key_id is None)

    @property
    def exit_code(self) -> int:
        """The recording's exit code when it is not 0; else 3 (inconclusive) when a member is missing or
        unsigned."""
        from observe.exits import Exit

        if self.record.exit_code != 0:
            return self.record.exit_code
        return Exit.INCONCLUSIVE if self.missing or self.unsigned else 0


def run_session(
    spec: Spec, directory: Path, argv: Sequence[str], options: RecordOptions, *, parent: Parent | None = None
) -> SessionOutcome:
    """Record ``argv`` as the coordinating recording of a session of ``spec`` in ``directory``.

    Raises what ``observe.recorder.record.record`` raises before the command runs (``out-exists`` when
    ``directory`` already holds a session stream).
    """
    from observe.env import SessionVars
    from observe.recorder.record import record
    from observe.refusals import OutExists
    from observe.session import layout
    from observe.session.arrivals import Arrivals
    from observe.session.members import LABEL_MEMBER, LABEL_ORIGIN
    from observe.session.spec import new_origin

    if layout.stream(directory).exists():
        raise OutExists(f"{layout.stream(directory)} exists: a session is never recorded over another")
    origin = new_origin(spec.origin)
    for sub in ("nodes", "sessions", "proofs"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    labels = dict(options.labels)
    if parent is not None:  # bound to its place in the parent session, as a node stream is
        labels.update({LABEL_ORIGIN: parent.origin, LABEL_MEMBER: parent.name})
    judged: list[Judged] = []
    arrivals = Arrivals(spec, directory, origin)
    options = replace(
        options,
        out=layout.stream_partial(directory),  # named session.aos once sealed: a parent takes it whole
        labels=labels,
        opening=((kinds.SESSION_OPEN, open_attrs(spec, origin, parent)),),
        command_env={SessionVars.DIR: str(directory.resolve()), SessionVars.ORIGIN: origin},
        companion=arrivals.start,
    )

    def before_seal(writer: StreamWriter) -> None:
        judged.extend(seal_members(writer, spec, directory, origin, arrivals.taken))

    result = record(argv, options, before_seal=before_seal)
    if result.seal is not None:
        os.replace(result.path, layout.stream(directory))
        result = replace(result, path=layout.stream(directory))
    return SessionOutcome(result, origin, tuple(judged))


def open_attrs(spec: Spec, origin: str, parent: Parent | None) -> dict[str, Any]:
    """Return the ``session.open`` attrs: the origin, its place in a parent session, the expected members (each
    with the public key its stream must be signed with), and whether the spec opted in to members without one."""
    from observe.session.spec import FANOUT

    return {
        "origin": origin,
        "name": None if parent is None else parent.name,
        "parent": None if parent is None else parent.origin,
        "members": [m.attrs() for m in spec.members],
        "fanout": FANOUT,
        "unsigned": spec.unsigned,
    }


def seal_members(
    writer: StreamWriter, spec: Spec, directory: Path, origin: str, taken: Mapping[str, Judged] | None = None
) -> list[Judged]:
    """Judge each expected member again, append ``session.member`` (``at: "end"``) for each one not ``taken``
    as it sealed (observe.session.arrivals) or judged otherwise now, then ``session.checkpoint``, and write the
    checkpoint, the proofs and the GPU list (observe.session.gpus). Memory: the members' leaves and GPU cursors (the
    fan-out), one member's stream at a time."""
    from aos import tlog
    from aos.proofs import Proof
    from observe.session import layout
    from observe.session.gpus import node_entries, sub_entries, write_list
    from observe.session.members import PROVEN, judge, member_attrs
    from observe.util.atomic import replace_file

    judged: list[Judged] = []
    leaves: list[bytes] = []
    for expected in spec.members:
        j = judge(directory, expected.name, expected.kind, origin, expected.key)
        judged.append(j)
        if j.member is not None:
            leaves.append(j.member.leaf_hash())
        before = (taken or {}).get(j.name)
        if before is None or before.member is None or j.member is None or before.member != j.member:
            writer.append(kinds.SESSION_MEMBER, member_attrs(j, "end"))
    checkpoint = tlog.Checkpoint(origin, len(leaves), tlog.tree_root(leaves))
    note, key = _note(writer, checkpoint)
    proven = [j for j in judged if j.status == PROVEN]
    gpus = write_list(
        directory,
        [
            sub_entries(directory, j.name)
            if j.kind == "session"
            else iter(node_entries(layout.node_stream(directory, j.name), j.name))
            for j in proven
        ],
    )
    writer.append(
        kinds.SESSION_CHECKPOINT,
        {
            "origin": origin,
            "size": checkpoint.size,
            "root": checkpoint.text().decode().split("\n")[2],
            "note": note.decode(),
            "key": key,
            "leaves": [j.name for j in proven],
            "not_proven": [{"name": j.name, "status": j.status, "reason": j.reason} for j in judged if j not in proven],
            "gpus": gpus,
        },
    )
    replace_file(layout.checkpoint(directory), note)
    for index, j in enumerate(proven):
        proof = Proof(origin, index, len(leaves), tuple(tlog.inclusion_proof(index, leaves)))
        replace_file(layout.proof(directory, j.name), proof.text())
    return judged


def _note(writer: StreamWriter, checkpoint: Any) -> tuple[bytes, str | None]:
    """The checkpoint note, signed by the recording's own key under the origin when it has one, and the key as a
    note verifier key (``name+id+base64``); unsigned: the note text alone, and None."""
    from cryptography.hazmat.primitives import serialization

    from aos import tlog

    text: bytes = checkpoint.text()
    if writer.signer is None:
        return text, None
    private = writer.signer.private
    seed = private.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return tlog.sign_note(text, checkpoint.origin, seed), tlog.verifier_key(checkpoint.origin, public)
