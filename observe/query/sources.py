"""Which streams join a query: paths and globs expanded, every stream verified, stream ids kept apart.

``open_sources`` verifies each stream (``aos.verify``), in worker processes when
there are many, and describes those that join (``Source``) and those skipped
with their refusal (``Skipped``). Two files claiming one stream id are never
merged: an identical copy is skipped as a copy, different bytes all skipped.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos import kinds
from aos.refusals import Refusal, StreamMissing
from observe.query.tables import Source, events_batch, events_schema, read_private
from observe.refusals import QueryStreamId

if TYPE_CHECKING:
    import pyarrow as pa

    from aos.signing import Verifier

__all__ = [
    "CACHE_BUDGET",
    "SMALL_STREAM",
    "STREAMS_PER_WORKER",
    "Skipped",
    "distinct_ids",
    "expand_paths",
    "open_one",
    "open_sources",
]

_GLOB = frozenset("*?[")


@dataclass(frozen=True)
class Skipped:
    """A path that did not join the query, and the refusal that says why."""

    path: str
    refusal: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "refusal": self.refusal}


def expand_paths(patterns: Iterable[str]) -> tuple[list[Path], list[Skipped]]:
    """Each argument as paths: a file as itself, a folder as its ``*.aos`` (recursively), a glob expanded.

    A pattern that names nothing is a ``stream-missing`` skip; a file named
    twice (also through a link) is taken once, in first-named order.
    """
    out: list[Path] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()
    for pattern in patterns:
        p = Path(pattern)
        if os.path.lexists(p):
            found = sorted(p.rglob("*.aos")) if p.is_dir() else [p]
        elif _GLOB & set(pattern):
            found = [Path(x) for x in sorted(glob.glob(pattern, recursive=True))]
        else:
            found = []
        if not found:
            what = "matches no file" if _GLOB & set(pattern) else "does not exist"
            skipped.append(Skipped(pattern, StreamMissing(f"{pattern} {what}").diagnostics()[len("refused: ") :]))
            continue
        for path in found:
            try:
                key = os.path.realpath(path)
            except (OSError, ValueError):
                key = str(path)
            if key not in seen:
                seen.add(key)
                out.append(path)
    return out, skipped


def _refusal_text(exc: Refusal) -> str:
    return f"{exc.name}: {exc.detail}"


# -- verification (pass 1) --------------------------------------------------------------


def _source(first: Any) -> str | None:
    """``source`` of a ``stream.open`` event as JSON (the JSON null when no repository held the cwd; None when
    the stream records none)."""
    if first is None or first.kind != kinds.STREAM_OPEN:
        return None
    try:
        attrs = first.attrs
        return json.dumps(attrs["source"], ensure_ascii=False, sort_keys=True) if "source" in attrs else None
    except (Refusal, RecursionError, ValueError):
        return None


def _opening(first: Any) -> tuple[str | None, str | None, str | None]:
    """host, labels (JSON) and argv (JSON) of a ``stream.open`` event, as stored."""
    if first is None or first.kind != kinds.STREAM_OPEN:
        return None, None, None
    try:
        attrs = first.attrs
    except Refusal:
        return None, None, None
    host = attrs.get("host")

    def dump(value: Any) -> str | None:
        try:
            return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)
        except (RecursionError, ValueError):  # nested past Python's limit: the value stays in the events' attrs
            return None

    return (
        host if isinstance(host, str) else dump(host),
        dump(attrs.get("labels")),
        dump(attrs.get("argv")),
    )


def _verified_source(path: Path, data: bytes, key: Verifier | None) -> Source:
    """Verify ``data`` (the bytes of ``path``); raise its refusal, else describe it."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from aos.reader import StreamFile, batch_events
    from aos.verify import verify_stream

    v = verify_stream(path, key, data=data)
    first = None
    last_ns: int | None = None
    with StreamFile(path, data=data) as f:
        for raw in f.batches():
            evs = batch_events(raw.batch.slice(0, 1))
            first = evs[0] if evs else None
            break
        seal_at = v.seal["bytes"]
        message = ipc.read_message(pa.py_buffer(data).slice(seal_at))
        seal = ipc.read_record_batch(message, f.schema)
        last_ns = seal.column(1)[0].as_py()
    host, labels, argv = _opening(first)
    return Source(
        path=path,
        stream_id=v.stream_id,
        digest=v.file_blake3,
        events=v.events,
        integrity="intact",
        damage=None,
        sealed=True,
        signed=v.signed,
        key_id=v.key_id,
        verdict=v.verdict if v.verdicts == 1 else None,
        first_ns=first.wall_ns if first is not None else None,
        last_ns=last_ns,
        host=host,
        labels=labels,
        source=_source(first),
        argv=argv,
    )


def _damaged_source(path: Path, data: bytes, refusal: Refusal) -> Source:
    """What can be read of a stream that did not verify (raises when nothing can)."""
    from blake3 import blake3

    from aos.reader import StreamFile, batch_events

    first = None
    first_ns: int | None = None
    last_ns: int | None = None
    events = 0
    with StreamFile(path, data=data) as f:
        sid = f.stream_id
        for raw in f.batches():
            n = raw.batch.num_rows
            if n == 0:
                continue
            if first is None:
                first = batch_events(raw.batch.slice(0, 1))[0]
                first_ns = first.wall_ns
            last_ns = raw.batch.column(1)[n - 1].as_py()
            events += n
    host, labels, argv = _opening(first)
    return Source(
        path=path,
        stream_id=sid,
        digest=blake3(data, max_threads=blake3.AUTO).hexdigest(),
        events=events,
        integrity=refusal.name,
        damage=refusal.detail,
        sealed=False,
        signed=False,
        key_id=None,
        verdict=None,
        first_ns=first_ns,
        last_ns=last_ns,
        host=host,
        labels=labels,
        source=_source(first),
        argv=argv,
    )


#: A stream file at most this large is decoded once, during verification, and its batches kept for the scan.
SMALL_STREAM = 1 << 20
#: At most this many bytes of such decoded batches are kept in all; later streams are re-read by the scan.
#: Decoded, not stored: a small file of zeros may decode to many batches of a v1 batch's bound each.
CACHE_BUDGET = 4 << 20


def _decoded(source: Source, data: bytes, budget: int) -> list[pa.RecordBatch] | None:
    """The ``events`` batches of ``data`` (bytes already verified, or recovered up to the damage);
    None (the scan re-reads it) as soon as they would take more than ``budget`` bytes."""
    from aos.reader import StreamFile

    schema = events_schema()
    kept: list[pa.RecordBatch] = []
    size = 0
    with StreamFile(source.path, data=data) as f:
        for raw in f.batches():
            size += raw.batch.nbytes
            if size > budget:
                return None
            if raw.batch.num_rows:
                kept.append(events_batch(raw.batch, source, schema))
    return kept


def open_one(path: Path, include_damaged: bool, key: Verifier | None, *, keep: int) -> Source | Skipped:
    """Verify one path: the stream that joins (a small one with its batches, when they take at most ``keep``
    bytes), or why it is skipped."""
    try:
        data = read_private(path)
    except Refusal as exc:
        return Skipped(str(path), _refusal_text(exc))
    source: Source | None = None
    try:
        source = _verified_source(path, data, key)
    except Refusal as exc:
        refusal = exc.with_traceback(None)  # the traceback's frames would keep the bytes alive
        if include_damaged:
            with contextlib.suppress(Refusal):  # nothing readable (not an AOS stream): the refusal says why
                source = _damaged_source(path, data, refusal)
        if source is None:
            return Skipped(str(path), _refusal_text(refusal))
    if keep > 0 and len(data) <= SMALL_STREAM:
        source.batches = _decoded(source, data, keep)
    return source


def raw_public_key(key: Verifier | None) -> bytes | None:
    """The 32 raw bytes of a public key, as it travels to a worker process (None for none)."""
    if key is None:
        return None
    from cryptography.hazmat.primitives import serialization

    return key.public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def verifier_from_raw(raw_key: bytes | None) -> Verifier | None:
    """The public key a worker process was sent (``raw_public_key``), again a ``Verifier``."""
    if raw_key is None:
        return None
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from aos.signing import Verifier

    return Verifier(Ed25519PublicKey.from_public_bytes(raw_key))


def _open_in_worker(path: Path, include_damaged: bool, raw_key: bytes | None) -> Source | Skipped:
    """``open_one`` in a worker process (a public key travels as its 32 raw bytes).

    A worker keeps no batches: sending them back costs more (pickled Arrow, one
    small batch a stream) than the scan's re-reading them.
    """
    return open_one(path, include_damaged, verifier_from_raw(raw_key), keep=0)


#: Streams per worker process below which verification stays in this process (a worker costs its start-up).
STREAMS_PER_WORKER = 256


def worker_count(streams: int) -> int:
    """Worker processes for reading ``streams`` streams: one per CPU, at most one per ``STREAMS_PER_WORKER``
    (fewer than 2: read them in this process)."""
    return min(os.cpu_count() or 1, streams // STREAMS_PER_WORKER)


def open_sources(
    paths: Sequence[Path],
    *,
    include_damaged: bool = False,
    key: Verifier | None = None,
    jobs: int | None = None,
) -> tuple[list[Source], list[Skipped]]:
    """Verify each path; return the streams that join and the paths skipped (with why), in the order given.

    Many streams are verified by ``jobs`` worker processes (default: one per
    CPU, at most one per ``STREAMS_PER_WORKER`` streams); each holds one
    stream's bytes at a time.
    """
    if jobs is None:
        jobs = worker_count(len(paths))
    sources: list[Source] = []
    skipped: list[Skipped] = []
    cached = 0

    def take(results: Iterable[Source | Skipped]) -> None:
        nonlocal cached
        for r in results:
            if isinstance(r, Skipped):
                skipped.append(r)
                continue
            size = r.cached_bytes()
            if cached + size > CACHE_BUDGET:
                r.batches = None  # over the budget: the scan re-reads it
            else:
                cached += size
            sources.append(r)

    if jobs < 2:
        take(open_one(path, include_damaged, key, keep=CACHE_BUDGET - cached) for path in paths)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from itertools import repeat

        raw_key = raw_public_key(key)
        # spawn, not fork: this process may already run Arrow's threads
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            chunk = max(1, min(64, len(paths) // (jobs * 4)))
            take(pool.map(_open_in_worker, paths, repeat(include_damaged), repeat(raw_key), chunksize=chunk))
    return distinct_ids(sources, skipped)


def distinct_ids(sources: list[Source], skipped: list[Skipped]) -> tuple[list[Source], list[Skipped]]:
    """Streams that claim one stream id are never merged: copies are taken once, conflicts not at all."""
    by_id: dict[str, list[Source]] = {}
    for s in sources:
        by_id.setdefault(s.stream_id, []).append(s)
    keep: list[Source] = []
    for s in sources:
        group = by_id[s.stream_id]
        if len(group) == 1:
            keep.append(s)
            continue
        first = group[0]
        if all(g.digest == first.digest for g in group):
            if s is first:
                keep.append(s)
            else:
                exc = QueryStreamId(f"stream id {s.stream_id} is also {first.path}, an identical copy: taken once")
                skipped.append(Skipped(str(s.path), _refusal_text(exc)))
            continue
        others = ", ".join(str(g.path) for g in group if g is not s)
        exc = QueryStreamId(f"stream id {s.stream_id} is also claimed by {others} with other bytes: neither is used")
        skipped.append(Skipped(str(s.path), _refusal_text(exc)))
    return keep, skipped
