"""How to install an extra, said once: the hint every "needs the X extra" message gives.

alpha-observe is not on PyPI (and ``pip install alpha-observe`` could fetch someone
else's package of that name), so a hint never names the bare distribution. It names
the source this copy was installed from, as pip recorded it (PEP 610,
``direct_url.json``), with the interpreter that runs this copy, so the extra lands in
the same environment (a virtual environment included):

- a checkout (``pip install .``, editable or not): ``PYTHON -m pip install '/path/to/checkout[s3]'``;
- a Git URL (``pip install 'alpha-observe @ git+URL'``):
  ``PYTHON -m pip install 'alpha-observe[s3] @ git+URL@COMMIT'``;
- an archive or wheel file: ``PYTHON -m pip install 'alpha-observe[s3] @ URL'``.

Where pip recorded no source, the hint says to run ``pip install '.[s3]'`` in a
checkout. Standard library only, and only read when a hint is printed.
"""

from __future__ import annotations

import json
import shlex
import sys
from urllib.parse import unquote, urlsplit

__all__ = ["DISTRIBUTION", "install_hint", "install_source"]

#: The distribution's name (pyproject.toml); never installable by this name alone from PyPI.
DISTRIBUTION = "alpha-observe"


def install_source() -> dict[str, object] | None:
    """pip's record of where this copy came from (``direct_url.json``), or None when there is none."""
    from importlib import metadata

    # Every copy on the path, the first that pip installed: a checkout on sys.path may also hold
    # the build's own metadata (alpha_observe.egg-info), which records no source.
    for dist in metadata.distributions(name=DISTRIBUTION):
        try:
            doc = json.loads(dist.read_text("direct_url.json") or "null")
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("url"), str):
            return doc
    return None


def _requirement(extra: str, source: dict[str, object] | None) -> str | None:
    """The pip requirement that installs ``extra`` from ``source``, or None when it cannot be said."""
    if source is None:
        return None
    url = str(source["url"])
    vcs = source.get("vcs_info")
    if isinstance(vcs, dict) and vcs.get("vcs") == "git":
        commit = vcs.get("commit_id")
        return f"{DISTRIBUTION}[{extra}] @ git+{url}" + (f"@{commit}" if isinstance(commit, str) else "")
    if isinstance(source.get("dir_info"), dict):
        parts = urlsplit(url)
        if parts.scheme != "file":
            return None
        return f"{unquote(parts.path)}[{extra}]"
    if isinstance(source.get("archive_info"), dict):
        return f"{DISTRIBUTION}[{extra}] @ {url}"
    return None


def install_hint(extra: str, source: dict[str, object] | bool | None = True) -> str:
    """The command that installs the ``extra`` into this environment, as one line of text.

    ``source``: pip's record (:func:`install_source`, read when left as True), for tests.
    """
    record = install_source() if source is True else source
    requirement = _requirement(extra, record if isinstance(record, dict) else None)
    python = shlex.quote(sys.executable or "python3")
    if requirement is None:
        return f"{python} -m pip install '.[{extra}]' (in a checkout of {DISTRIBUTION}; it is not on PyPI)"
    return f"{python} -m pip install {shlex.quote(requirement)}"
