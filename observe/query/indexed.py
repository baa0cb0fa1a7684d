"""The streams of a store's evidence index as query sources, each row checked against its stream's seal.

A bucket's streams are first copied into the user's mirror (``observe.query.mirror``), each kept only when its
bytes hash to its name; everything below then reads the copies as a folder store's files.

``indexed_sources(store)`` reads the index (``observe.store_index``) and makes
each row a ``Source`` without verifying the stream again. A row is not signed,
so it is trusted only once ``check_row`` has read its stream's tail (the batch
holding the verdict, through the seal), chained it to the seal the row names
(with a key: the seal signed by it) and found the row's id, signer and verdict
to be the sealed ones; the verdict and checks the query sees are then the
sealed event's, never the index's. A stream is verified again (``aos.verify``)
when its file's size no longer matches its row, when its row does not pass
that check (listed in ``mismatched`` with the refusal, e.g. ``index-row``), or
when ``reverify`` asks. A row this user checked before, whose file is still
the same file, is not read again (``observe.query.checked``: a memo in the
user's cache, which ``reverify`` ignores). Many rows' tails are checked by one worker process per CPU,
as ``open_sources`` verifies many streams. The bytes before the tail are proved when the query
reads the stream's events: ``EventScan`` hashes every byte it reads and stops
the query when the digest is not the row's. A row whose file is gone is
skipped (``stream-missing``); a re-verified file that is no longer the bytes
its name says is skipped (``stream-digest``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from observe.query.sources import Skipped, distinct_ids, open_one
from observe.query.tables import Source
from observe.refusals import StreamDigest

if TYPE_CHECKING:
    from aos.refusals import Refusal
    from aos.signing import Verifier
    from observe.query.checked import Sealed

__all__ = ["Indexed", "indexed_sources"]


@dataclass
class Indexed:
    """The sources of an index, those skipped, and the paths of the streams that were re-verified."""

    sources: list[Source]
    skipped: list[Skipped]
    reverified: list[str] = field(default_factory=list)
    #: the rows not trusted (their stream verified again instead), each with the refusal that says why
    mismatched: list[Skipped] = field(default_factory=list)


def _ns(value: Any) -> int | None:
    """A timestamp of the index (microseconds) as nanoseconds."""
    import datetime as dt

    if value is None:
        return None
    delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return int((delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1000)


def indexed_sources(
    store_url: str | os.PathLike[str],
    *,
    reverify: bool = False,
    key: Verifier | None = None,
    include_damaged: bool = False,
) -> Indexed:
    """The streams the index of a store lists, as query sources (a bucket's through the user's mirror)."""
    from aos.refusals import Refusal
    from observe.query.checked import FINGERPRINTED, Memo, fingerprint
    from observe.store import open_store
    from observe.store_index import read_streams

    store = open_store(store_url)
    wanted = (*FINGERPRINTED, "first_time", "host", "labels", "argv", "source")
    # not the devices: a list of structs, slow to convert
    all_rows = read_streams(store).select(list(wanted)).to_pylist()
    root = store.local_path("")
    not_copied: dict[str, Refusal] = {}
    if root is None:  # a bucket: its streams copied into the user's mirror first (observe.query.mirror)
        from observe.query.mirror import mirror_streams

        root, not_copied = mirror_streams(store, ((r["file_blake3"], r["file_size"]) for r in all_rows))
    memo = Memo(root)
    key_id = key.key_id if key is not None else None
    out = Indexed([], [])
    listed: list[tuple[dict[str, Any], Path, Sealed | None]] = []
    unchecked: list[tuple[int, str]] = []  # (place in listed, fingerprint) of the rows whose tail is read
    for row in all_rows:
        path = root / f"{row['file_blake3']}.aos"
        if row["file_blake3"] in not_copied:
            refused = not_copied[row["file_blake3"]]
            out.skipped.append(Skipped(store.url(path.name), f"{refused.name}: {refused.detail}"))
            continue
        try:
            st = os.stat(path)
        except OSError as gone:
            out.skipped.append(Skipped(str(path), f"stream-missing: indexed, but not in the store: {gone.strerror}"))
            continue
        sealed: Sealed | None = None
        if not reverify and st.st_size == row["file_size"]:
            fp = fingerprint(row, st, key_id)
            sealed = memo.get(fp)
            if sealed is None:
                unchecked.append((len(listed), fp))
        listed.append((row, path, sealed))
    checked = _check_tails([(listed[i][1], listed[i][0]) for i, _ in unchecked], key)
    for (i, fp), tail in zip(unchecked, checked, strict=True):
        row, path, _ = listed[i]
        if isinstance(tail, Refusal):
            out.mismatched.append(Skipped(str(path), f"{tail.name}: {tail.detail}"))
        else:
            memo.add(fp, tail)
            listed[i] = (row, path, tail)
    for row, path, sealed in listed:
        if sealed is None:
            out.reverified.append(str(path))
            got = open_one(path, include_damaged, key, keep=0)
            if isinstance(got, Source) and got.integrity == "intact" and got.digest != row["file_blake3"]:
                wrong = StreamDigest(f"the stored bytes hash to {got.digest}, not to their name")
                got = Skipped(str(path), f"{wrong.name}: {wrong.detail}")
            (out.skipped if isinstance(got, Skipped) else out.sources).append(got)  # type: ignore[arg-type]
            continue
        out.sources.append(
            Source(
                path=path,
                stream_id=row["stream_id"],
                digest=row["file_blake3"],
                events=row["events"],
                integrity="intact",
                damage=None,
                sealed=True,
                signed=row["signed"],
                key_id=key_id if key_id is not None else row["key_id"],
                verdict=sealed.verdict,
                first_ns=_ns(row["first_time"]),
                last_ns=sealed.wall_ns,
                host=row["host"],
                labels=row["labels"],
                argv=row["argv"],
                source=row["source"],
                sealed_prefix=(sealed.prefix_bytes, sealed.prefix_blake3),
            )
        )
    memo.save()
    out.sources, more = distinct_ids(out.sources, [])
    out.skipped.extend(more)
    return out


def _check_tail(path: Path, row: dict[str, Any], key: Verifier | None) -> Sealed | Refusal:
    """``check_row``'s sealed verdict and seal of one row, or the refusal that says why the row is not trusted."""
    from aos.refusals import Refusal
    from observe.query.checked import Sealed
    from observe.store_index import check_row

    try:
        tail = check_row(path, row, key)
    except Refusal as exc:
        return exc
    verdict = tail.verdicts[0].attrs if tail.verdicts else None
    return Sealed(verdict, tail.seal_wall_ns, tail.seal_at, str(tail.seal["file_blake3"]))


def _check_in_worker(path: Path, row: dict[str, Any], raw_key: bytes | None) -> Sealed | Refusal:
    """``_check_tail`` in a worker process (the key travels as its raw bytes)."""
    from observe.query.sources import verifier_from_raw

    return _check_tail(path, row, verifier_from_raw(raw_key))


def _check_tails(rows: Sequence[tuple[Path, dict[str, Any]]], key: Verifier | None) -> list[Sealed | Refusal]:
    """Each row's tail checked, in order: by one worker process per CPU where there are many
    (``observe.query.sources.worker_count``, as ``open_sources`` verifies), else here."""
    from observe.query.sources import raw_public_key, worker_count

    jobs = worker_count(len(rows))
    if jobs < 2:
        return [_check_tail(path, row, key) for path, row in rows]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from itertools import repeat

    ctx = multiprocessing.get_context("spawn")  # not fork: this process may already run Arrow's threads
    with ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
        chunk = max(1, min(64, len(rows) // (jobs * 4)))
        paths, found = zip(*rows, strict=True)
        return list(pool.map(_check_in_worker, paths, found, repeat(raw_public_key(key)), chunksize=chunk))
