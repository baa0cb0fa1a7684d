"""Starting servers and processes in the tests: a transient ``EAGAIN`` is tried again, a bounded number of times.

On a loaded machine ``fork`` can fail with ``BlockingIOError: [Errno 11]`` (EAGAIN: no process or memory to
spare just now); a re-run then passes. The fixtures that start servers (sshd, PostgreSQL, S3, Phoenix) and
the tests that start lanes call :func:`retry_eagain`, which tries again after a growing pause, says so on
stderr each time, and gives up after :data:`ATTEMPTS` with the last error. Any other error is raised at once.
"""

from __future__ import annotations

import errno
import sys
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: How many times a start is tried in all.
ATTEMPTS = 5
#: The pause before the second try, in seconds; each later pause is one more of it.
PAUSE_S = 0.5


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` is the transient resource error a start is tried again after (EAGAIN)."""
    return isinstance(exc, OSError) and exc.errno == errno.EAGAIN


def retry_eagain(start: Callable[[], T], what: str, *, attempts: int = ATTEMPTS, pause_s: float = PAUSE_S) -> T:
    """``start()``, tried again after a transient EAGAIN at most ``attempts`` times in all (``what`` names it in
    the message each retry prints); any other error, or the last EAGAIN, is raised."""
    attempt = 1
    while True:
        try:
            return start()
        except OSError as exc:
            if not transient(exc) or attempt >= attempts:
                raise
            wait = pause_s * attempt
            print(
                f"tests: starting {what} failed with a transient {exc!r}: trying again in {wait:g} s "
                f"(attempt {attempt + 1} of {attempts})",
                file=sys.stderr,
                flush=True,
            )
            time.sleep(wait)
            attempt += 1
