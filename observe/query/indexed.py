"""The streams of a store's evidence index as query sources, re-verified only when their file changed.

``indexed_sources(store)`` reads the index (``observe.store_index``) and makes
each row a ``Source`` without reading the stream: the row is what was verified
when the stream entered the store. A stream is re-verified (``aos.verify``)
only when its file's size no longer matches its row, when ``reverify`` asks,
or when a key is given (the index records the seal's signer, not a check
against this key). The bytes of a stream whose size still matches are proved
when the query reads its events: ``EventScan`` hashes every byte it reads and
stops the query when the digest is not the row's. A row whose file is gone is
skipped (``stream-missing``); a re-verified file that is no longer the bytes
its name says is skipped (``stream-digest``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from observe.query.sources import Skipped, distinct_ids, open_one
from observe.query.tables import Source
from observe.refusals import StoreUrl, StreamDigest

if TYPE_CHECKING:
    from aos.signing import Verifier

__all__ = ["Indexed", "indexed_sources"]


@dataclass
class Indexed:
    """The sources of an index, those skipped, and the paths of the streams that were re-verified."""

    sources: list[Source]
    skipped: list[Skipped]
    reverified: list[str] = field(default_factory=list)


def _ns(value: Any) -> int | None:
    """A timestamp of the index (microseconds) as nanoseconds."""
    import datetime as dt

    if value is None:
        return None
    delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return int((delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1000)


def _verdict(row: dict[str, Any], checks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The sealed verdict as the query's tables read it: gate, verdict, scope and checks."""
    if row["verdict"] is None:
        return None
    listed = [{k: c[k] for k in ("name", "status", "reason", "evidence")} for c in checks]
    return {"gate": row["gate"], "verdict": row["verdict"], "scope": row["scope"], "checks": listed}


def indexed_sources(
    store_url: str | os.PathLike[str],
    *,
    reverify: bool = False,
    key: Verifier | None = None,
    include_damaged: bool = False,
) -> Indexed:
    """The streams the index of a folder store lists, as query sources (``store-url`` for any other store)."""
    from observe.store import open_store
    from observe.store_index import read_index

    store = open_store(store_url)
    if store.local_path("") is None:
        raise StoreUrl(f"{os.fspath(store_url)}: query reads the index of a folder store (fetch the streams here)")
    rows, checks = read_index(store)
    by_digest: dict[str, list[dict[str, Any]]] = {}
    for c in checks.to_pylist():
        by_digest.setdefault(c["file_blake3"], []).append(c)
    out = Indexed([], [])
    for row in rows.to_pylist():
        path = store.local_path(f"{row['file_blake3']}.aos")
        assert path is not None  # a folder store
        try:
            size = os.stat(path).st_size
        except OSError as gone:
            out.skipped.append(Skipped(str(path), f"stream-missing: indexed, but not in the store: {gone.strerror}"))
            continue
        if reverify or key is not None or size != row["file_size"]:
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
                key_id=row["key_id"],
                verdict=_verdict(row, by_digest.get(row["file_blake3"], [])),
                first_ns=_ns(row["first_time"]),
                last_ns=_ns(row["last_time"]),
                host=row["host"],
                labels=row["labels"],
                argv=row["argv"],
                source=row["source"],
            )
        )
    out.sources, more = distinct_ids(out.sources, [])
    out.skipped.extend(more)
    return out
