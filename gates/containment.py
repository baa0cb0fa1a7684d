"""``process-containment``: a physical scope needs a recording whose command was ended as a whole.

The recorder runs the command in a container of its own and ends it with the
recording (observe/recorder/containment.py): ``process.start`` names the
containment (``containment``: ``"cgroup"`` or ``"sweep"``) and whether it can
guarantee the end (``guaranteed``); ``process.stray``, when the end found
something, says what it ended and whether the end was in fact guaranteed.
A process that outlived the recording could have written anything after the
recorder stopped looking (a forged file, a CI output line), so:

- no ``process.start``: ``inconclusive`` (the command never started);
- a containment that cannot guarantee the end (the sweep), or a ``process.stray``
  saying the end was not guaranteed, or listing survivors: ``inconclusive``;
- otherwise ``pass``, naming the containment.

A stream whose ``process.start`` has no ``containment`` key at all was recorded
before the recorder contained commands: the rule is left out for it
(``gates.engine.versioned_out``), so such evidence keeps the verdict it was
sealed with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aos import kinds
from aos.event import Event
from gates.evidence import Evidence
from gates.typing import Findings, Outcome

__all__ = ["CONTAINMENT_CHECK", "containment_recorded", "process_containment"]

#: The registered check (gates/checks.py).
CONTAINMENT_CHECK = "process-containment"


def _events(ev: Evidence, kind: str) -> list[Event]:
    return [e for e in ev.events if e.kind == kind]


def containment_recorded(ev: Evidence) -> bool:
    """Whether the stream was recorded by a recorder that contains commands (``process.start`` names one)."""
    starts = _events(ev, kinds.PROCESS_START)
    return not starts or "containment" in starts[0].attrs


def _survivors(attrs: Mapping[str, Any]) -> str:
    found = attrs.get("survivors")
    if not isinstance(found, list) or not found:
        return ""
    pids = ", ".join(str(p.get("pid")) for p in found[:5] if isinstance(p, dict))
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    return f"; {len(found)} process(es) outlived it (pid {pids}{more})"


def process_containment(ev: Evidence, args: Mapping[str, Any]) -> Outcome:
    """Pass when the command ran in a containment that ended all of it for certain (see the module)."""
    f = Findings()
    starts = _events(ev, kinds.PROCESS_START)
    if not starts:
        f.inconclusive("the command never started (no process.start): nothing says how it was contained")
        return f.outcome("")
    start = starts[0]
    f.use([start.seq])
    kind = str(start.attrs.get("containment"))
    note = start.attrs.get("containment_note")
    if start.attrs.get("guaranteed") is not True:
        why = f" ({note})" if note else ""
        f.inconclusive(
            f"the command ran under the {kind} containment{why}, which cannot guarantee that none of its "
            "processes outlived the recording"
        )
    for stray in _events(ev, kinds.PROCESS_STRAY):
        attrs = stray.attrs
        if "guaranteed" not in attrs:
            continue
        f.use([stray.seq])
        if attrs.get("guaranteed") is not True or _survivors(attrs):
            said = attrs.get("containment_note")
            f.inconclusive(
                f"the end of the command's processes ({attrs.get('containment')}) was not guaranteed"
                + (f": {said}" if said else "")
                + _survivors(attrs)
            )
    ended = sum(len(s.attrs.get("ended") or []) for s in _events(ev, kinds.PROCESS_STRAY))
    tail = f"; {ended} process(es) it left were ended" if ended else ""
    return f.outcome(f"the command ran in a {kind} of its own, ended as a whole with the recording{tail}")
