"""The recorder on one node of a session: it records the node's command as ``record`` does and seals its own
stream into the session's folder.

    result = run_node("node-3", Path(os.environ["ALPHA_FLEET_DIR"]), origin, ["./train.sh"], RecordOptions())

The node's stream is an ordinary AOS stream (its GPUs observed by the recorder's
own observer, its processes contained, attributed by digest, as any recording),
whose ``stream.open`` labels name the session's origin and this member
(``aos.session.origin``, ``aos.session.member``): the coordinator takes it as
this member's stream only then. On a remote node the folder is the node's own
and the launcher copies ``nodes/NAME.aos`` back into the session's folder.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from observe.recorder.recording import RecordOptions, RecordResult

__all__ = ["run_node"]


def run_node(name: str, directory: Path, origin: str, argv: Sequence[str], options: RecordOptions) -> RecordResult:
    """Record ``argv`` as member ``name`` of session ``origin``, sealed at ``directory/nodes/NAME.aos``.

    While it records, the stream is ``nodes/.NAME.aos.partial``; it is renamed once sealed, so a stream at
    the member's name is always whole (one killed before its seal stays partial, and is judged so).

    Raises ``session-spec`` for a name that is not a member name, and what ``record`` raises before the
    command runs (``out-exists`` when that member's stream is already there).
    """
    from aos.proofs import NAME
    from observe.recorder.record import record
    from observe.refusals import SessionSpec
    from observe.session import layout
    from observe.session.members import LABEL_MEMBER, LABEL_ORIGIN

    if not NAME.fullmatch(name):
        raise SessionSpec(f"{name!r} is not a member name (letters, digits, '.', '_', '-'; 64 at most)")
    import os

    from observe.refusals import OutExists

    final = layout.node_stream(directory, name)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        raise OutExists(f"{final} exists: member {name} of this session has sealed its stream already")
    labels = {**dict(options.labels), LABEL_ORIGIN: origin, LABEL_MEMBER: name}
    result = record(argv, replace(options, out=layout.node_partial(directory, name), labels=labels))
    if result.seal is not None:  # it arrives whole: the session's watcher never sees a stream half written
        os.replace(result.path, final)
        result = replace(result, path=final)
    return result
