"""Whether this process can start a thread, asked before a native library starts its pool.

DuckDB and Arrow start worker threads of their own. On a machine out of threads
(``RLIMIT_NPROC``, a cgroup's ``pids.max``) they raise, but what they left half
started (Arrow's pool, jemalloc's background thread, DuckDB's scheduler) can crash
the process later with SIGSEGV, after the ``resource`` refusal was printed and
before its exit code is returned. Starting and joining one Python thread first
refuses the same way (``RuntimeError: can't start new thread``, which
``aos.resources.machine_error`` names) before anything native has started.
"""

from __future__ import annotations

import threading

__all__ = ["require_a_thread"]


def require_a_thread() -> None:
    """Start and join a thread that does nothing; raises ``RuntimeError`` when no thread can be started."""
    probe = threading.Thread(target=lambda: None, name="alpha-thread-probe", daemon=True)
    probe.start()
    probe.join()
