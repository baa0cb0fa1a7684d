"""observe.util.templates: compiled templates kept in the user's cache, only where that folder is the user's
alone (a cached template is code the process runs)."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from observe.util.templates import bytecode_cache


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ALPHA_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "templates"


def test_made_private_and_used_by_a_report(cache: Path, tmp_path: Path) -> None:
    """The folder is made 0700, and rendering a report leaves its compiled template there."""
    from observe.report.page import _template

    assert bytecode_cache() is not None
    assert 0o700 == cache.stat().st_mode & 0o777
    _template.cache_clear()
    try:
        _template()
    finally:
        _template.cache_clear()
    assert [p for p in cache.iterdir() if p.name.endswith(".cache")]


def test_a_folder_others_can_write_is_not_used(cache: Path) -> None:
    """Forgery: a cache folder anyone can write (a shared $ALPHA_CACHE) could hold planted code: not used."""
    cache.mkdir(parents=True)
    cache.chmod(0o777)
    assert bytecode_cache() is None
    cache.chmod(0o750)
    assert bytecode_cache() is None


def test_a_link_or_another_users_folder_is_not_used(cache: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    cache.parent.mkdir(parents=True)
    cache.symlink_to(elsewhere)
    assert bytecode_cache() is None
    cache.unlink()
    if os.geteuid() != 0:
        pytest.skip("giving the folder to another account needs root")
    cache.mkdir(mode=0o700)
    nobody = pwd.getpwnam("nobody")
    os.chown(cache, nobody.pw_uid, nobody.pw_gid)
    assert bytecode_cache() is None
