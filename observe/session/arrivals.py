"""A session's members as they seal: a watcher of the session's folder while its launcher runs.

The coordinating recording starts it once ``session.open`` is in its stream
(``RecordOptions.companion``). Every ``POLL`` seconds it looks at each expected
member not yet taken; a member's stream that is new or changed since the last
look is judged (observe.session.members), and once it is proven a
``session.member`` (``at: "sealed"``) is appended: the stream's digest and seal
head, when the coordinator received them. A node's stream takes its name only
when sealed, so a file is judged once it is whole; one still being copied in
fails the judgment and is looked at again when it changes. When the launcher
has ended the watcher stops, and the coordinator judges every member again
before its seal (``at: "end"`` for what was not taken or has changed since).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from aos import kinds

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from observe.recorder.recording import Append
    from observe.session.members import Judged
    from observe.session.spec import Spec

__all__ = ["POLL", "Arrivals"]

#: Seconds between two looks at the folder (a stat per member not yet taken).
POLL = 0.2


class Arrivals:
    """The members taken so far (``taken``: name -> judgment), for the coordinator's seal."""

    def __init__(self, spec: Spec, directory: Path, origin: str) -> None:
        self.spec, self.directory, self.origin = spec, directory, origin
        self.taken: dict[str, Judged] = {}
        self._seen: dict[str, tuple[int, int]] = {}
        self._stop = threading.Event()

    def start(self, append: Append) -> Callable[[], None]:
        """Start watching on a thread of its own; return what stops it (and waits for its last look)."""
        thread = threading.Thread(target=self._watch, args=(append,), name="aos-session-arrivals", daemon=True)
        thread.start()

        def stop() -> None:
            self._stop.set()
            thread.join()

        return stop

    def _watch(self, append: Append) -> None:
        while not self._stop.wait(POLL):
            self.look(append)

    def look(self, append: Append) -> None:
        """Take every expected member whose stream is new or changed and now proven."""
        from observe.session import layout
        from observe.session.members import PROVEN, judge, member_attrs

        for expected in self.spec.members:
            if expected.name in self.taken:
                continue
            kind = "session" if expected.session else "stream"
            try:
                st = os.stat(layout.member_stream(self.directory, expected.name, kind))
            except OSError:
                continue
            if self._seen.get(expected.name) == (st.st_size, st.st_mtime_ns):
                continue
            self._seen[expected.name] = (st.st_size, st.st_mtime_ns)
            j = judge(self.directory, expected.name, kind, self.origin, expected.key)
            if j.status == PROVEN:
                self.taken[expected.name] = j
                append(kinds.SESSION_MEMBER, member_attrs(j, "sealed"))
