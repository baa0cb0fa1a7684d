"""Jinja's compiled templates kept in the user's own cache, so a process does not compile them again.

A tracker site build after one added run renders three templates (the index, a run page, a report), and
compiling them was an eighth of that build at 10,000 runs (issue 36). Jinja's bytecode cache keeps each
compiled template in ``templates/`` of the tool's cache folder (``observe.util.cache``), keyed by the
template's name and its source's checksum, so an edited template is compiled again.

A cached template is code this process runs. So the cache is used only when its folder is this user's
alone: a real folder (not a link), owned by the effective user, writable by no one else (mode 0700, as it is
made); elsewhere (a shared ``$ALPHA_CACHE``) templates are compiled every time. Whoever can write there is
this user, who can as well change the tool itself.
"""

from __future__ import annotations

import os
import stat
from typing import Any

__all__ = ["bytecode_cache"]


def bytecode_cache() -> Any | None:
    """A ``jinja2.FileSystemBytecodeCache`` over the user's ``templates`` cache folder, or None where that
    folder cannot be made or is not this user's alone."""
    from jinja2 import FileSystemBytecodeCache

    from observe.util.cache import cache_folder

    folder = cache_folder("templates")
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        return None
    return FileSystemBytecodeCache(str(folder))
