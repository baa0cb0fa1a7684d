"""The one way the tests run ``alpha`` as a process, and the one environment it gets.

The environment policy: a child gets this process's environment minus every variable that
belongs to an enclosing recording, a CI system or the tool's own configuration, so a test
sees the same tool whether the suite runs by hand, inside ``alpha observe gate`` (as
``.ci/run`` runs it) or on a CI runner. Removed are the names starting with ``ALPHA_``,
``AOS_``, ``GITHUB_``, ``GITLAB_``, ``CI_``, ``BUILDKITE`` or ``PYTEST_XDIST_`` (this suite's
own worker: a pytest the test records is not one), and ``CI``, ``GITLAB_CI``,
``NO_COLOR`` and ``FORCE_COLOR``. What a test passes in ``env`` is added on top of that
(a value of ``None`` removes the variable), so a test that needs one of them says so.

The same predicate (:func:`foreign`) clears this process's environment before every test
(tests/conftest.py), so a process a test starts another way (``Popen``, a pty, ``os.execv``)
inherits the same environment as one started through :func:`alpha`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The ``alpha`` console script of this interpreter's installation (its bin folder first).
ALPHA = shutil.which("alpha", path=str(Path(sys.executable).parent)) or shutil.which("alpha") or "alpha"

#: Prefixes and names of the variables a child does not inherit (see the module's docstring).
FOREIGN_PREFIXES = ("ALPHA_", "AOS_", "GITHUB_", "GITLAB_", "CI_", "BUILDKITE", "PYTEST_XDIST_")
FOREIGN_NAMES = frozenset({"CI", "GITLAB_CI", "NO_COLOR", "FORCE_COLOR"})
#: The tool's variables the suite sets for every test and its children: the memo of checked index rows
#: (tests/conftest.py puts it in the session's temporary folder).
KEPT_NAMES = frozenset({"ALPHA_CACHE"})


def foreign(name: str) -> bool:
    """True for a variable a child does not inherit: an enclosing recording's, a CI system's or the tool's."""
    return (name in FOREIGN_NAMES or name.startswith(FOREIGN_PREFIXES)) and name not in KEPT_NAMES


def child_env(env: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """The environment of a child process: this one's minus the foreign variables, then ``env`` on top
    (``None`` removes a name)."""
    full = {k: v for k, v in os.environ.items() if not foreign(k)}
    for name, value in (env or {}).items():
        if value is None:
            full.pop(name, None)
        else:
            full[name] = value
    return full


def alpha(
    *args: str,
    cwd: Path | str | None = None,
    env: Mapping[str, str | None] | None = None,
    input: bytes | str | None = None,
    check: bool = False,
    timeout: float = 60,
    text: bool = False,
    **kw: Any,
) -> subprocess.CompletedProcess[Any]:
    """Run ``alpha ARGS...`` in ``cwd`` with :func:`child_env` of ``env``, its output captured
    (bytes, or text with ``text=True``); ``check`` raises on a non-zero exit."""
    return subprocess.run(
        [ALPHA, *args],
        cwd=cwd,
        env=child_env(env),
        input=input,
        capture_output=True,
        text=text,
        check=check,
        timeout=timeout,
        **kw,
    )
