"""Reading a stream's events back: every intact event in order, one as a JSON line, only some of them
(by seq, by step), and an artifact's captured bytes."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Iterator
from typing import IO, Any

from aos import kinds
from aos.event import Event
from aos.refusals import Refusal
from observe.refusals import ArtifactMissing

__all__ = ["StepFilter", "artifact_bytes", "event_json", "iter_stream", "only_seqs"]


def iter_stream(path: str | os.PathLike[str], damage: list[Refusal]) -> Iterator[Event]:
    """Every intact event, streamed; damage after the last good batch is appended to ``damage``."""
    from aos.reader import StreamFile, batch_events

    with StreamFile(path) as f:
        for raw in f.batches():
            yield from batch_events(raw.batch)
        if f.damage is not None:
            damage.append(f.damage)


#: ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))`` without building an encoder per call.
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def event_json(ev: Event) -> str:
    """One JSON Lines record: seq, kind, wall_ns, step, attrs, and data_b64 when there is data."""
    record: dict[str, Any] = {
        "seq": ev.seq,
        "kind": ev.kind,
        "wall_ns": ev.wall_ns,
        "step": ev.step,
        "attrs": ev.attrs,
    }
    line = _JSON.encode(record)
    if ev.data is None:
        return line
    # base64's alphabet needs no JSON escape: the data goes in as it is, never scanned by the encoder
    # (the same bytes as encoding it in the record, for half the work on a big chunk).
    return f'{line[:-1]},"data_b64":"{base64.b64encode(ev.data).decode("ascii")}"}}'


def only_seqs(events: Iterable[Event], seqs: frozenset[int], found: set[int]) -> Iterator[Event]:
    """The events whose seq is in ``seqs`` (each added to ``found``); stops after the last one."""
    last = max(seqs, default=-1)
    for ev in events:
        if ev.seq in seqs:
            found.add(ev.seq)
            yield ev
        if ev.seq >= last:
            return


class StepFilter:
    """Admits the events of every step named NAME, and of the steps nested in them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.spans: set[str] = set()

    @property
    def matched(self) -> bool:
        return bool(self.spans)

    def admits(self, ev: Event) -> bool:
        from aos.text import os_text

        if ev.kind == kinds.STEP_START and ev.step is not None:
            try:
                a = ev.attrs
            except Refusal:
                a = {}
            if os_text(a.get("name")) == self.name or a.get("parent") in self.spans:
                self.spans.add(ev.step)
        return ev.step is not None and ev.step in self.spans


def artifact_bytes(events: Iterable[Event], path: str, out: IO[bytes]) -> int:
    """Write the captured bytes of artifact ``path`` to ``out``; checks their sha256.

    Raises ``artifact-missing`` when the stream holds no such artifact, when its
    content was omitted, or when the chunks do not add up to the recorded file.
    """
    import hashlib

    from aos.text import os_text

    want = os.path.normpath(path)
    meta: dict[str, Any] | None = None
    sha = hashlib.sha256()
    written = 0
    for ev in events:
        if ev.kind == kinds.ARTIFACT and os.path.normpath(os_text(ev.attrs.get("path")) or "") == want:
            meta, sha, written = ev.attrs, hashlib.sha256(), 0
        elif ev.kind == kinds.ARTIFACT_CHUNK and meta is not None and ev.attrs.get("path") == meta.get("path"):
            chunk = ev.data or b""
            if ev.attrs.get("offset") != written:
                raise ArtifactMissing(f"{path}: chunk at offset {ev.attrs.get('offset')} where {written} was due")
            sha.update(chunk)
            out.write(chunk)
            written += len(chunk)
    if meta is None:
        raise ArtifactMissing(f"the stream holds no artifact {path!r}")
    if meta.get("content") == "omitted":
        raise ArtifactMissing(f"{path}: only its hash was recorded (content omitted, {meta.get('size')} bytes)")
    if written != meta.get("size") or sha.hexdigest() != meta.get("sha256"):
        raise ArtifactMissing(f"{path}: the captured chunks ({written} bytes) do not match the recorded file")
    return written
