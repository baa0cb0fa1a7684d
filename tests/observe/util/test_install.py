"""Install hints name a command that works from where this copy was installed, and fire on every path that needs one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from observe.util.install import install_hint

PY = sys.executable


class TestHintText:
    def test_from_a_checkout(self) -> None:
        """Installed from a checkout (pip install . or -e .): this interpreter's pip and the checkout's path."""
        source = {"url": "file:///src/alpha%20observe", "dir_info": {"editable": True}}
        assert f"{PY} -m pip install '/src/alpha observe[s3]'" == install_hint("s3", source)

    def test_from_git(self) -> None:
        """Installed from a Git URL: the same URL and commit, with the extra."""
        source = {"url": "https://example.org/alpha.git", "vcs_info": {"vcs": "git", "commit_id": "abc123"}}
        expected = f"{PY} -m pip install 'alpha-observe[query] @ git+https://example.org/alpha.git@abc123'"
        assert expected == install_hint("query", source)

    def test_from_a_wheel(self) -> None:
        """Installed from an archive or wheel file: that file, with the extra."""
        source = {"url": "file:///w/alpha_observe-0.1.0-py3-none-any.whl", "archive_info": {}}
        expected = f"{PY} -m pip install 'alpha-observe[otlp] @ file:///w/alpha_observe-0.1.0-py3-none-any.whl'"
        assert expected == install_hint("otlp", source)

    def test_unknown_source_never_names_pypi(self) -> None:
        """With no record of the source, the hint says to install from a checkout, and that PyPI has no such package."""
        assert f"{PY} -m pip install '.[postgres]' (in a checkout of alpha-observe; it is not on PyPI)" == install_hint(
            "postgres", None
        )

    def test_this_copy(self) -> None:
        """The hint of this copy never asks pip for the bare distribution name (which PyPI does not hold)."""
        assert "pip install 'alpha-observe[" not in install_hint("s3")


#: Runs ``alpha`` with these packages made unimportable (what `pip install .` without the extra leaves).
_BLOCKED = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
from observe.cli.entry import main
sys.argv = ["alpha", *sys.argv[2:]]
main()
"""


def _without(modules: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = [PY, "-c", _BLOCKED, modules, *args]
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, check=False)


class TestTheHintFires:
    @pytest.mark.parametrize(
        "args",
        [
            ["observe", "push", "{stream}", "--store", "s3://evidence/ci"],
            ["observe", "fetch", "s3://e/" + "a" * 64 + ".aos", "-o", "x.aos"],
        ],
        ids=["push", "fetch"],
    )
    def test_s3_without_boto3(self, args: list[str], stream: Path, tmp_path: Path) -> None:
        """push/fetch with an s3:// store and no boto3: store-unreachable naming how to install the s3 extra."""
        done = _without("boto3,botocore,s3transfer", *[a.format(stream=stream) for a in args], cwd=tmp_path)
        assert 1 == done.returncode, done.stderr
        assert (
            f"refused: store-unreachable: an s3:// store needs boto3, which is not installed: {install_hint('s3')}\n"
            == done.stderr
        )

    @pytest.mark.parametrize("args", [["init"], ["run", "start", "--experiment", "E1"], ["status"]])
    def test_postgresql_without_psycopg(self, args: list[str], tmp_path: Path) -> None:
        """A postgresql:// tracker and no psycopg: tracker-database naming the postgres extra."""
        done = _without("psycopg", "tracker", "--db", "postgresql://ci@db.invalid/progress", *args, cwd=tmp_path)
        assert 1 == done.returncode, done.stderr
        expected = f"a postgresql:// tracker needs psycopg, which is not installed: {install_hint('postgres')}"
        assert f"refused: tracker-database: {expected}\n" == done.stderr

    def test_attach_by_postgresql_without_psycopg(self, stream: Path, tmp_path: Path) -> None:
        """attach --db postgresql://... without psycopg is the same refusal."""
        done = _without(
            "psycopg",
            "observe",
            "attach",
            str(stream),
            "--db",
            "postgresql://ci@db.invalid/p",
            "--run",
            "1",
            cwd=tmp_path,
        )
        assert (1, True) == (
            done.returncode,
            done.stderr.startswith("refused: tracker-database: a postgresql:// tracker needs psycopg"),
        )
