"""The user's own cache folder for this tool: memos of what this user has already checked.

``$ALPHA_CACHE``, else ``$XDG_CACHE_HOME/alpha-observe``, else
``~/.cache/alpha-observe``; each memo in a folder of its own under it
(``index-checked``: index rows checked against their streams,
``observe.query.checked``; ``site-checked``: the streams a tracker's site
verified, and ``site-pages``: the identity of each page it wrote, both
``tracker.site``; ``store-mirror``: an S3 store's streams, ``observe.query.mirror``; ``templates``: Jinja's
compiled templates, ``observe.util.templates``). A memo is the user's, never a store's or a
site's: whoever can write there can make this user's commands trust what is
written, as whoever can write the user's home can replace the tool.
"""

from __future__ import annotations

import os
from pathlib import Path

from observe.env import StoreVars

__all__ = ["cache_folder"]


def cache_folder(name: str) -> Path:
    """The folder of the memo ``name`` (not created)."""
    given = os.environ.get(StoreVars.CACHE)
    if given:
        return Path(given) / name
    base = os.environ.get(StoreVars.XDG_CACHE_HOME) or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "alpha-observe" / name
