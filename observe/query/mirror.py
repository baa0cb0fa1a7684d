"""The streams an S3 store's index lists, mirrored in the user's cache, so ``query --store s3://...`` reads
them as it reads a folder store.

A store's stream objects are named by their BLAKE3 (``<digest>.aos``), so a
copy is checked as it arrives: each object is downloaded into a temporary file
beside its place, hashed on the way, and renamed into place only when its
bytes hash to its name; an object that does not is not kept, and its row is
skipped (``stream-digest``), as a folder store's would be when verified
again. A copy already there, of the row's size, is not downloaded again;
every other check (the row against the stream's tail, the events' bytes
against the seal) then runs on the copy exactly as on a folder store's file.

The mirror is the user's, as the memo is (``observe.util.cache``:
``store-mirror/<BLAKE3 of the store's URL>``): whoever can write the user's
cache can change a copy, and a query then checks the copy (an edited copy
fails its row's check or the events' digest, as an edited file of a folder
store does). Nothing removes old copies: delete the folder to reclaim it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos.refusals import StreamWrite
from observe.refusals import StreamDigest

if TYPE_CHECKING:
    from aos.refusals import Refusal

__all__ = ["CONCURRENCY", "mirror_folder", "mirror_streams"]

#: Objects downloaded at once (each a small GET: the latency, not the bandwidth, is what is waited for).
CONCURRENCY = 16


def mirror_folder(store: Any) -> Path:
    """Where the copies of ``store`` (``observe.store.open_store``'s) lie (not created)."""
    from blake3 import blake3

    from observe.util.cache import cache_folder

    return cache_folder("store-mirror") / blake3(store.url("").encode("utf-8")).hexdigest()[:32]


def mirror_streams(store: Any, wanted: Iterable[tuple[str, int]]) -> tuple[Path, dict[str, Refusal]]:
    """Copy each ``(digest, size)`` stream of ``store`` (``observe.store.open_store``'s, a bucket) that the
    mirror lacks, ``CONCURRENCY`` at a time: the mirror's folder, and the refusal of each digest not copied."""
    root = mirror_folder(store)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    missing = []
    for digest, size in wanted:
        try:
            if os.stat(root / f"{digest}.aos").st_size == size:
                continue
        except OSError:
            pass
        missing.append(digest)
    failed: dict[str, Refusal] = {}
    if not missing:
        return root, failed
    store.client()  # made once here, not by every thread at once
    with ThreadPoolExecutor(min(CONCURRENCY, len(missing))) as pool:
        for digest, refusal in zip(missing, pool.map(lambda d: _copy(store, root, d), missing), strict=True):
            if refusal is not None:
                failed[digest] = refusal
    return root, failed


def _copy(store: Any, root: Path, digest: str) -> Refusal | None:
    """Download one object into the mirror, kept only when its bytes hash to its name."""
    import tempfile

    from blake3 import blake3

    from aos.refusals import Refusal

    name = f"{digest}.aos"
    fd, tmp = tempfile.mkstemp(dir=root, prefix=".part-")
    try:
        with os.fdopen(fd, "w+b") as f:
            store.get(name, f)
            f.seek(0)
            hasher = blake3()
            while chunk := f.read(1 << 20):
                hasher.update(chunk)
        got = hasher.hexdigest()
        if got != digest:
            return StreamDigest(f"{store.url(name)}: the stored bytes hash to {got}, not to their name")
        os.replace(tmp, root / name)
        return None
    except Refusal as exc:
        return exc
    except OSError as exc:
        return StreamWrite(f"{root}: cannot write the store's copy here: {exc.strerror or exc}")
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
