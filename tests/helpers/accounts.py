"""Unprivileged accounts the tests run processes as, one set per pytest-xdist worker.

Two workers must never share an account whose state a test changes or measures: the lane account's
home holds the plants of tests/observe/devices/test_node_trust.py (a ``usercustomize.py`` that another
worker's lane login would run), and the thread limit of tests/observe/cli/test_resource.py counts every
thread its user holds. So each worker gets its own: :func:`per_worker` names it, :func:`ensure` makes it.
"""

from __future__ import annotations

import os
import pwd
import subprocess


def per_worker(base: str) -> str:
    """``base`` in a run of one process (or xdist's first worker), ``base-gwN`` in worker N of several."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return base if worker == "gw0" else f"{base}-{worker}"


def ensure(name: str) -> pwd.struct_passwd:
    """The account ``name``, created on first use (``useradd``: its own group and home, a login shell, not
    locked, so a key logs in); idempotent, and safe against another process making it meanwhile."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    subprocess.run(
        ["useradd", "--create-home", "--shell", "/bin/bash", "--user-group", name],
        capture_output=True,
        timeout=60,
        check=False,  # another process may have made it meanwhile: looked up again below
    )
    subprocess.run(["usermod", "-p", "*", name], capture_output=True, timeout=60, check=False)
    return pwd.getpwnam(name)
