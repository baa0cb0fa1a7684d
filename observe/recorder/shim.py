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

    ``observe receipt`` and ``observe step`` (called hundreds of times a lane) start with ``-S``
    as well: no ``site`` scan of site-packages and its ``.pth`` files, the path being given whole
    anyway. What a ``.pth`` did that they need, an editable install's finder, is not loaded: the
    folder that holds this tool's packages goes first on their path instead (:func:`_tool_root`).
    """
    import shlex

    bin_dir = os.path.join(directory, "bin")
    os.makedirs(bin_dir, mode=0o700, exist_ok=True)
    # "" (the current directory) and relative folders as absolute paths; other entries (a path hook's
    # key, such as an editable install's "__editable__...__path_hook__") exactly as they are
    paths = [os.getcwd() if not p else os.path.abspath(p) if os.path.isdir(p) else p for p in sys.path]
    setup = f"import sys; sys.argv[0] = 'alpha'; sys.path[:] = {paths!a}"
    tail = "from observe.cli.entry import main; main()"
    code = f"{setup}; {tail}"
    root = _tool_root()
    fast_paths = paths if root in paths else [root, *paths]
    fast = f"import sys; sys.argv[0] = 'alpha'; sys.path[:] = {fast_paths!a}; {tail}"
    python = shlex.quote(os.fsdecode(os.fsencode(sys.executable or "python3"))).encode("utf-8", "surrogateescape")
    script = b"#!/bin/sh\n"
    script += b'case "$1 $2" in "observe receipt" | "observe step") exec ' + python
    script += b" -I -S -c " + shlex.quote(fast).encode("ascii") + b' "$@" ;; esac\n'
    script += b"exec " + python + b" -I -c " + shlex.quote(code).encode("ascii") + b' "$@"\n'
    shim = os.path.join(bin_dir, "alpha")
    fd = os.open(shim, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o700)
    try:
        os.write(fd, script)
    finally:
        os.close(fd)
    return shim


def _tool_root() -> str:
    """The folder that holds this tool's top-level packages (``observe``, ``aos``): site-packages when
    installed, the source tree when installed editable (found there by a finder a ``.pth`` loads)."""
    import aos
    import observe

    roots = {os.path.dirname(os.path.dirname(os.path.abspath(m.__file__ or ""))) for m in (aos, observe)}
    if len(roots) != 1:  # pragma: no cover - the packages of one distribution lie side by side
        raise RuntimeError(f"observe and aos lie in different folders: {sorted(roots)}")
    return roots.pop()


def put_alpha_first(env: dict[str, str], directory: str) -> None:
    """Make the command find this recorder's ``alpha`` first on ``PATH``, and its path in ``$AOS_ALPHA``."""
    try:
        shim = alpha_shim(directory)
    except OSError as exc:  # pragma: no cover - the channel directory was just made, private
        logger().warning("cannot write the alpha shim; nested alpha resolves from PATH", error=str(exc))
        return
    env[ENV_ALPHA] = shim
    env["PATH"] = os.path.dirname(shim) + (os.pathsep + env["PATH"] if env.get("PATH") else "")
