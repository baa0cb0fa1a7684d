"""A session level's GPU list: every GPU its proven nodes' recorders observed, at any depth, sorted.

``DIR/gpus`` (docs/FORMAT.md section 9.5) holds one line per (GPU UUID, member path) pair, ``UUID<TAB>PATH``,
sorted by UUID then path (bytewise), PATH relative to the session (``node-3``, ``rack-0/node-3``). The
coordinator writes it when it seals, by a k-way merge with one cursor per proven member: a node's GPUs (the
``device.observed`` events of its own machine, read from its sealed stream, as ``gates.session.DeviceTally``
tallies them) or a sub-session's own list, each line prefixed with its name. Its BLAKE3 and line count are
sealed in ``session.checkpoint`` (``gpus``), so the session's leaf in its parent commits to it. Memory at each
level: the fan-out's cursors, never the fleet.

``alpha observe session gate`` merges the same cursors level by level (a node's from its stream as the gate
evaluates it), names a GPU two members observed, and checks each level's sealed list against the merge.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from blake3 import blake3

from observe.session import layout

__all__ = ["check_list", "lines", "node_entries", "sub_entries", "write_list"]

Entry = tuple[str, str]


def node_entries(stream: Path, name: str) -> list[Entry]:
    """The GPUs a node's sealed stream shows its recorder observed, sorted, as ``(uuid, name)``."""
    from aos.reader import StreamFile
    from gates.session import DeviceTally

    tally = DeviceTally()
    with StreamFile(stream) as f:
        for _ in tally.watch(f.events()):
            pass
    return [(uuid, name) for uuid in sorted(tally.uuids)]


def lines(path: Path, prefix: str = "") -> Iterator[Entry]:
    """Read a GPU list a line at a time, each path prefixed with ``prefix`` (a sub-session's name and ``/``)."""
    with path.open("rb") as f:
        for raw in f:
            uuid, _, member = raw.rstrip(b"\n").decode("utf-8", "surrogateescape").partition("\t")
            yield uuid, prefix + member


def sub_entries(directory: Path, name: str) -> Iterator[Entry]:
    """A sub-session member's list, its paths under ``name/`` (its digest was checked when it was judged)."""
    return lines(layout.gpus(layout.sub_session(directory, name)), name + "/")


def write_list(directory: Path, cursors: Iterable[Iterator[Entry]]) -> dict[str, Any]:
    """Merge ``cursors`` (each sorted) into ``DIR/gpus``; return its ``session.checkpoint`` attr (BLAKE3, lines)."""
    from observe.util.atomic import replace_file_with

    h, count = blake3(), 0

    def chunks() -> Iterator[bytes]:
        nonlocal count
        for uuid, member in heapq.merge(*cursors):
            line = f"{uuid}\t{member}\n".encode("utf-8", "surrogateescape")
            h.update(line)
            count += 1
            yield line

    replace_file_with(layout.gpus(directory), chunks())
    return {"blake3": h.hexdigest(), "lines": count}


def check_list(directory: Path, sealed: Any) -> str | None:
    """Why ``DIR/gpus`` is not the list the session sealed (``sealed``: its ``session.checkpoint`` ``gpus``);
    None when it is, or when the session sealed none (a session from before GPU lists)."""
    if not isinstance(sealed, dict):
        return None
    path = layout.gpus(directory)
    h, count = blake3(), 0
    try:
        with path.open("rb") as f:
            for raw in f:
                h.update(raw)
                count += 1
    except OSError as exc:
        return f"{path.name}: {exc.strerror or exc}"
    if h.hexdigest() != sealed.get("blake3") or count != sealed.get("lines"):
        return f"{path.name} is not the GPU list the session sealed"
    return None
