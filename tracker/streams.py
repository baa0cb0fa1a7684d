"""What the tracker derives from a stream: every evidence column, from the verified bytes.

``attach`` records these columns and ``audit`` derives them again from the
stream and names any that differ, so both go through :func:`derive`:

1. ``aos.verify.verify_stream``: intact and sealed (the signature checked
   against the tracker's trusted key that signed it, or, for ``attach`` on a
   tracker that trusts keys, required from one of them).
2. The sealed verdict, read exactly as ``alpha observe verdict`` reads it
   (``aos.verify.require_verdict`` and ``gates.verdict.Verdict.from_attrs``):
   a stream without one, with two, or with a malformed one is ``stream-verdict``.
3. One more pass over the same bytes (their BLAKE3 must equal the verified
   file's, else ``tracker-stream-changed``): the ``stream.open`` event's wall
   time (when it was recorded) and the commit its ``source`` names, and the GPU
   UUIDs of every ``device.observed`` event (what the recorder observed,
   docs/FORMAT.md section 4.1).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos import kinds
from aos.refusals import StreamSignature
from tracker.ids import iso_ms
from tracker.refusals import TrackerStreamChanged

if TYPE_CHECKING:
    from aos.signing import Verifier
    from aos.verify import Verification

__all__ = ["DERIVED", "StreamFacts", "derive", "device_observers", "verify_for_tracker"]

#: The evidence columns derived from the stream (and re-derived by ``audit``).
DERIVED = (
    "stream_id",
    "seal_head",
    "file_digest",
    "size",
    "events",
    "verdict",
    "scope",
    "gate",
    "signed",
    "key_id",
    "recorded_at",
    "devices",
    "source_commit",
)


#: Columns a tracker older than migration 3 did not record: null there means "not recorded", not a lie.
_LEGACY_NULL = frozenset({"recorded_at", "devices", "source_commit"})


@dataclass(frozen=True)
class StreamFacts:
    """Every derived evidence column of one verified stream."""

    path: Path
    stream_id: str
    seal_head: str
    file_digest: str
    size: int
    events: int
    verdict: str
    scope: str
    gate: str
    signed: bool
    key_id: str | None
    recorded_at: str | None
    devices: tuple[str, ...]
    signature_checked: bool
    source_commit: str | None = None
    #: ``(uuid, serial)`` of each GPU NVML showed with its serial (never a simulated one's): kept beside the
    #: device's UUID (migration 6), not an evidence column.
    serials: tuple[tuple[str, str], ...] = ()
    #: What verifying the stream found (for the evidence index a caller appends to); not an evidence column.
    verification: Verification | None = field(default=None, compare=False, repr=False)

    def differing(self, row: Mapping[str, Any]) -> list[str]:
        """The :data:`DERIVED` columns where an evidence ``row`` says other than this stream. A row attached
        before migration 3 has ``recorded_at`` and ``devices`` null, one before migration 4 ``source_commit``:
        there that means "not recorded"."""
        derived = self.columns()
        return [c for c in DERIVED if row[c] != derived[c] and not (c in _LEGACY_NULL and row[c] is None)]

    def columns(self) -> dict[str, Any]:
        """The values of :data:`DERIVED`, as the evidence table holds them."""
        return {
            "stream_id": self.stream_id,
            "seal_head": self.seal_head,
            "file_digest": self.file_digest,
            "size": self.size,
            "events": self.events,
            "verdict": self.verdict,
            "scope": self.scope,
            "gate": self.gate,
            "signed": int(self.signed),
            "key_id": self.key_id,
            "recorded_at": self.recorded_at,
            "devices": json.dumps(list(self.devices), separators=(",", ":")),
            "source_commit": self.source_commit,
        }


def verify_for_tracker(path: str | os.PathLike[str], keys: Mapping[str, Verifier]) -> Verification:
    """``aos.verify.verify_stream``, with the signature required (from a trusted key) when ``keys`` is not empty."""
    from aos.verify import verify_stream

    v = verify_stream(path)
    if keys:
        if not v.signed:
            raise StreamSignature(
                f"{path} is not signed, and this tracker accepts only streams signed by a trusted key"
            )
        key = keys.get(v.key_id or "")
        if key is None:
            raise StreamSignature(f"{path} is signed by key {v.key_id}, which this tracker does not trust")
        v = verify_stream(path, key)
    return v


def _verify_as_signed(path: Path, keys: Mapping[str, Verifier]) -> Verification:
    """Verify; when the seal names a trusted key, check the signature against it."""
    from aos.verify import verify_stream

    v = verify_stream(path)
    key = keys.get(v.key_id or "") if v.signed else None
    return verify_stream(path, key) if key is not None else v


def device_observers(path: Path) -> dict[str, str]:
    """Each GPU UUID the stream at ``path`` observed, with the observer that reported it (``nvml``,
    ``simulated``...); empty when the file cannot be read as a stream. For labels in views only: a view says
    ``simulated`` from it, never more than the stream's verified row says."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from aos.reader import StreamFile, compute, is_in, read_options
    from aos.schema import COLUMNS

    fields = [COLUMNS.index("kind"), COLUMNS.index("attrs")]
    wanted = pa.array([kinds.DEVICE_OBSERVED])
    found: dict[str, str] = {}
    try:
        with StreamFile(path) as f:
            for batch in ipc.open_stream(pa.py_buffer(f.view), options=read_options(included_fields=fields)):
                mask = is_in(batch.column(0), wanted)
                if not compute("any", mask).as_py():
                    continue
                for text in batch.filter(mask).column(1).to_pylist():
                    attrs = json.loads(text)
                    if not isinstance(attrs, dict):
                        continue
                    simulated = attrs.get("observer") == "simulated" or attrs.get("simulated_from") is not None
                    observer = "simulated" if simulated else str(attrs.get("observer") or "none")
                    gpus = attrs.get("gpus")
                    for gpu in gpus if isinstance(gpus, list) else []:
                        if isinstance(gpu, dict) and isinstance(gpu.get("uuid"), str):
                            found.setdefault(gpu["uuid"], observer)
    except Exception:  # noqa: BLE001 - a label only: an unreadable stream gets none (audit names the damage)
        return {}
    return found


def _observed(
    path: Path, file_blake3: str
) -> tuple[int, str | None, tuple[str, ...], str | None, tuple[tuple[str, str], ...]]:
    """(size, stream.open wall time, observed GPU UUIDs, the commit stream.open's ``source`` names, each GPU's
    serial as NVML gave it), read from bytes whose BLAKE3 is ``file_blake3``.

    Those bytes are the ones the verifier just validated in full, so they are read
    here as the plain Arrow IPC stream they are, without validating them again.
    """
    import pyarrow as pa
    import pyarrow.ipc as ipc
    from blake3 import blake3

    from aos.reader import StreamFile, compute, is_in, read_options, string_set
    from aos.schema import COLUMNS

    # Only the three columns needed are decompressed; in each batch they are 0, 1, 2.
    fields = [COLUMNS.index("wall_ns"), COLUMNS.index("kind"), COLUMNS.index("attrs")]
    options = read_options(included_fields=fields)
    wanted = string_set([kinds.STREAM_OPEN, kinds.DEVICE_OBSERVED])
    opened: int | None = None
    commit: str | None = None
    uuids: set[str] = set()
    serials: dict[str, str] = {}
    with StreamFile(path) as f:
        threads = blake3.AUTO if f.size > (4 << 20) else 1  # threads only pay off on a large file
        if blake3(f.view, max_threads=threads).hexdigest() != file_blake3:
            raise TrackerStreamChanged(f"{path} changed while it was read")
        size = f.size
        for batch in ipc.open_stream(pa.py_buffer(f.view), options=options):
            if batch.num_rows > 256:  # a long batch: let Arrow pick the few rows wanted
                mask = is_in(batch.column(1), wanted)
                if not compute("any", mask).as_py():
                    continue
                batch = batch.filter(mask)
            for wall, kind, text in zip(*(batch.column(i).to_pylist() for i in range(3)), strict=True):
                if kind == kinds.STREAM_OPEN and opened is None:
                    opened = wall
                    source = json.loads(text).get("source")
                    named = source.get("commit") if isinstance(source, dict) else None
                    commit = named if isinstance(named, str) and named else None
                elif kind == kinds.DEVICE_OBSERVED:
                    attrs = json.loads(text)
                    nvml = attrs.get("observer") == "nvml" and attrs.get("simulated_from") is None
                    gpus = attrs.get("gpus")
                    for gpu in gpus if isinstance(gpus, list) else []:
                        if isinstance(gpu, dict) and isinstance(gpu.get("uuid"), str):
                            uuids.add(gpu["uuid"])
                            health = gpu.get("health")
                            serial = health.get("serial") if nvml and isinstance(health, dict) else None
                            if isinstance(serial, str) and serial:
                                serials.setdefault(gpu["uuid"], serial)
            del batch
    opened_at = iso_ms(opened) if opened is not None else None
    return size, opened_at, tuple(sorted(uuids)), commit, tuple(sorted(serials.items()))


def derive(
    path: str | os.PathLike[str], keys: Mapping[str, Verifier], *, require_trusted: bool, keep: bool = False
) -> StreamFacts:
    """Verify the stream at ``path`` and derive every evidence column from it; a ``Refusal`` otherwise.

    ``require_trusted`` (attach): when ``keys`` is not empty the stream must be
    signed by one of them. Otherwise (audit) a signature by a key in ``keys`` is
    checked, and any other is taken as the stream claims it. With ``keep`` the facts hold the
    verification itself (``verification``: for the evidence index row of a stream entering the evidence).
    """
    from aos.verify import require_verdict
    from gates.verdict import Verdict

    p = Path(path)
    v = verify_for_tracker(p, keys) if require_trusted else _verify_as_signed(p, keys)
    verdict = Verdict.from_attrs(require_verdict(v))
    size, recorded_at, devices, commit, serials = _observed(p, v.file_blake3)
    return StreamFacts(
        path=p,
        stream_id=v.stream_id,
        seal_head=v.head,
        file_digest=v.file_blake3,
        size=size,
        events=v.events,
        verdict=verdict.verdict,
        scope=verdict.scope,
        gate=verdict.gate,
        signed=v.signed,
        key_id=v.key_id,
        recorded_at=recorded_at,
        devices=devices,
        signature_checked=v.signature_checked,
        source_commit=commit,
        serials=serials,
        verification=v if keep else None,
    )


def file_blake3(path: Path) -> str:
    """The BLAKE3 of a whole file, read a MiB at a time (what ``evidence.file_digest`` holds)."""
    from blake3 import blake3

    h = blake3()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
