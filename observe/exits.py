"""The exit codes of ``alpha``, named once (GNU ``timeout``/``env`` conventions).

Standard library only: the recorder, the light channel client and the command line
all name their exit codes here, so no command spells a number of its own.
"""

from __future__ import annotations

import contextlib
import os
import sys
from enum import IntEnum
from typing import NoReturn

__all__ = ["Exit", "ResourceExit", "leave_now"]


class Exit(IntEnum):
    """The exit codes of ``alpha``; a recorded command's own exit code passes through unchanged.

    ====================  ====  ==========================================================
    name                  code  meaning
    ====================  ====  ==========================================================
    ``OK``                0     done: a pass, a stream intact and sealed, a file written
    ``FAIL``              1     a fail, or refused (``refused: NAME: detail`` on stderr)
    ``USAGE``             2     usage: a mistyped option, an unknown gate, SQL DuckDB refuses
    ``INCONCLUSIVE``      3     the gate could not decide (a sealed ``inconclusive``)
    ``RESTORED``          123   the command replaced or edited the stream at ``--out``: the recorder put its
                                own stream back and kept what was there as ``PATH.foreign-N``
    ``TIMEOUT``           124   ``--timeout`` ended the command
    ``RECORDER``          125   the recorder itself failed (or a report asked for cannot be written)
    ``CANNOT_EXECUTE``    126   the command was found but cannot be executed
    ``NOT_FOUND``         127   the command was not found
    ``SIGNAL``            128   128+N: the command was killed by signal N
    ====================  ====  ==========================================================
    """

    OK = 0
    FAIL = 1
    USAGE = 2
    INCONCLUSIVE = 3
    RESTORED = 123
    TIMEOUT = 124
    RECORDER = 125
    CANNOT_EXECUTE = 126
    NOT_FOUND = 127
    SIGNAL = 128


class ResourceExit(SystemExit):
    """The exit of a ``resource`` refusal, already printed: the console script (``observe.cli.entry``) ends the
    process with :func:`leave_now`; a caller running the command tree in process sees a plain SystemExit."""


def leave_now(code: int) -> NoReturn:
    """Exit with ``code`` at once, standard output and error flushed, skipping the interpreter's teardown.

    For a ``resource`` refusal only, and only from the console script (never inside a process that goes on):
    once the machine refused a thread, a native library left half started (Arrow's jemalloc, DuckDB's pool)
    can crash in the teardown, and the process would end with SIGSEGV instead of the code the refusal
    documents. The tool registers no ``atexit`` work that this would skip.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(int(code))
