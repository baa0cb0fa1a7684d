"""The recorder's own ``alpha``, handed to the command: a shim first on its ``PATH`` and named in ``$AOS_ALPHA``."""

from __future__ import annotations

import os
import sys

from observe.env import ChannelVars
from observe.recorder.sinks import logger

__all__ = ["ENV_ALPHA", "alpha_shim", "put_alpha_first"]

#: The path of the recorder's own ``alpha`` (a shim), exported to the command.
ENV_ALPHA = ChannelVars.ALPHA


def alpha_shim(directory: str) -> str:
    """Write ``DIRECTORY/bin/alpha``: this recorder's own ``alpha`` (same interpreter, same modules).

    A command started by full path outside a virtualenv (``/venv/bin/alpha observe
    gate ...`` with no ``alpha`` on ``PATH``) still finds ``alpha observe step``,
    and never a different version of the tool: the shim runs ``sys.executable``
    isolated (``-I``: no ``PYTHONPATH``, no current directory on the path) with
    exactly this process's module path.
    """
    import shlex

    bin_dir = os.path.join(directory, "bin")
    os.makedirs(bin_dir, mode=0o700, exist_ok=True)
    # "" (the current directory) and relative folders as absolute paths; other entries (a path hook's
    # key, such as an editable install's "__editable__...__path_hook__") exactly as they are
    paths = [os.getcwd() if not p else os.path.abspath(p) if os.path.isdir(p) else p for p in sys.path]
    code = f"import sys; sys.argv[0] = 'alpha'; sys.path[:] = {paths!a}; from observe.cli.entry import main; main()"
    python = os.fsencode(sys.executable or "python3")
    script = b"#!/bin/sh\nexec " + shlex.quote(os.fsdecode(python)).encode("utf-8", "surrogateescape")
    script += b" -I -c " + shlex.quote(code).encode("ascii") + b' "$@"\n'
    shim = os.path.join(bin_dir, "alpha")
    fd = os.open(shim, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o700)
    try:
        os.write(fd, script)
    finally:
        os.close(fd)
    return shim


def put_alpha_first(env: dict[str, str], directory: str) -> None:
    """Make the command find this recorder's ``alpha`` first on ``PATH``, and its path in ``$AOS_ALPHA``."""
    try:
        shim = alpha_shim(directory)
    except OSError as exc:  # pragma: no cover - the channel directory was just made, private
        logger().warning("cannot write the alpha shim; nested alpha resolves from PATH", error=str(exc))
        return
    env[ENV_ALPHA] = shim
    env["PATH"] = os.path.dirname(shim) + (os.pathsep + env["PATH"] if env.get("PATH") else "")
