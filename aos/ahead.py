"""Reading a stream one batch ahead: the next batch is framed and decoded (zstd, on a second thread)
while the caller hashes the one before, so the verifier's time is nearer the larger of the two, not
their sum. pyarrow's decoding and BLAKE3's hashing of large buffers both let go of the GIL.

The batches, the damage and the end-of-stream marker are exactly those of ``StreamFile.batches()``;
an error of the machine on the second thread is raised in the caller's. The mapped pages of each batch
are given back by the caller (``StreamFile.release``) once it is done with its bytes, never before.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Generator

from aos.reader import RawBatch, StreamFile
from aos.resources import machine_error

__all__ = ["AHEAD_FROM", "batches_ahead"]

#: The smallest stream file (bytes) read a batch ahead; a smaller one is read on the caller's thread (a site
#: verifying 10,000 small streams spent a tenth of its time starting and waiting on threads, issue 36).
AHEAD_FROM = 1 << 20


class _End:
    """What the second thread puts last: nothing more (``error`` None), or the error it met."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


def batches_ahead(f: StreamFile) -> Generator[RawBatch, None, None]:
    """``f.batches()``, each decoded on a second thread one batch ahead of the caller.

    Close the iterator (``contextlib.closing``) before ``f`` is closed: closing it stops and joins the
    second thread. Where no thread can be had, or the file is smaller than ``AHEAD_FROM``, the batches are
    read on the caller's thread.
    """
    if f.size < AHEAD_FROM:  # a small stream: starting a thread costs more than decoding it here
        yield from f.batches(release=False)
        return
    handoff: queue.Queue[RawBatch | _End] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def produce() -> None:
        batches = f.batches(release=False)
        try:
            for raw in batches:
                handoff.put(raw)
                if stop.is_set():
                    return
            handoff.put(_End())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread, raised there
            handoff.put(_End(exc))
        finally:
            batches.close()

    thread = threading.Thread(target=produce, name="aos-read-ahead", daemon=True)
    try:
        thread.start()
    except RuntimeError as exc:  # no thread to be had: read on this one
        if not machine_error(exc):
            raise
        yield from f.batches(release=False)
        return
    try:
        while True:
            item = handoff.get()
            if isinstance(item, _End):
                if item.error is not None:
                    raise item.error
                return
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # let a put that waits return, so the thread sees ``stop``
            with contextlib.suppress(queue.Empty):
                handoff.get(timeout=0.01)
        thread.join()
