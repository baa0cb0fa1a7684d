"""Streams read by other Arrow implementations, and ``export --format arrow`` for readers without zstd.

Every recipe of docs/FORMAT.md section 7 ("Reading a stream elsewhere") runs as
written on a real recording and must print the stream's event kinds. polars is
large and not in the test extra: its recipe skips, saying so, where it is not
installed (DataFusion is in the test extra, for the evidence index); the
JavaScript one skips without node.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from aos.reader import read_stream
from observe.cli.root import main
from tests.helpers.paths import ROOT
from tests.helpers.run import alpha

JS = ROOT / "tests" / "js"


def recipes(lang: str) -> list[str]:
    """The ``lang`` blocks of docs/FORMAT.md section 7."""
    text = (ROOT / "docs" / "FORMAT.md").read_text(encoding="utf-8")
    section = text[text.index("## 7. Reading a stream elsewhere") :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(rf"```{lang}\n(.*?)```", section, flags=re.S)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with ci.aos (a real gated recording with output and a step) and ci.arrow, its export."""
    d = tmp_path_factory.mktemp("readers")
    proc = alpha(
        "observe",
        "gate",
        "exit-zero",
        "--quiet",
        "--out",
        str(d / "ci.aos"),
        "--",
        "sh",
        "-c",
        "printf 'hello\\n'; alpha observe step build -- printf 'built\\n'",
        cwd=d,
        timeout=120,
    )
    assert 0 == proc.returncode, proc.stderr
    r = CliRunner().invoke(
        main, ["observe", "export", str(d / "ci.aos"), "--format", "arrow", "-o", str(d / "ci.arrow")]
    )
    assert 0 == r.exit_code, r.stderr
    return d


def kinds(d: Path) -> list[str]:
    return [e.kind for e in read_stream(d / "ci.aos").events]


def run_python(code: str, d: Path) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], cwd=d, capture_output=True, text=True, timeout=120, check=False)
    assert 0 == done.returncode, done.stderr
    out: list[str] = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    return out


class TestArrowExport:
    def test_is_an_uncompressed_arrow_file_of_the_verified_events(self, folder: Path) -> None:
        """The export is an Arrow IPC file (ARROW1) with the stream's schema, metadata and every event, uncompressed."""
        import pyarrow as pa

        data = (folder / "ci.arrow").read_bytes()
        assert (b"ARROW1", b"ARROW1") == (data[:6], data[-6:])
        exported = pa.ipc.open_file(folder / "ci.arrow").read_all()
        original = pa.ipc.open_stream(folder / "ci.aos").read_all()
        assert original.equals(exported, check_metadata=True)
        assert b"built\n" in data  # the output's bytes lie in the file as they are: no compression

    def test_refuses_a_stream_that_does_not_verify(self, folder: Path, tmp_path: Path) -> None:
        """A damaged stream is refused by name and no file is written."""
        from tracker.testing import flip_byte

        bad = tmp_path / "bad.aos"
        shutil.copy(folder / "ci.aos", bad)
        flip_byte(bad)
        r = CliRunner().invoke(main, ["observe", "export", str(bad), "--format", "arrow", "-o", str(tmp_path / "x")])
        assert (1, False) == (r.exit_code, (tmp_path / "x").exists())
        assert r.stderr.startswith("refused: stream-")

    def test_js_reads_the_export_without_a_codec(self, folder: Path) -> None:
        """apache-arrow under node reads the uncompressed export with no zstd codec registered."""
        node = node_or_skip()
        script = (
            'import { readFileSync } from "node:fs";\nimport { tableFromIPC } from "apache-arrow";\n'
            'console.log(JSON.stringify(tableFromIPC(readFileSync("ci.arrow")).getChild("kind").toArray()));\n'
        )
        assert kinds(folder) == run_js(node, script, folder)


class TestWhichReadsTheExport:
    """docs/FORMAT.md's table of readers: who reads the uncompressed export (an IPC file), who does not."""

    def test_pyarrow_reads_both(self, folder: Path) -> None:
        """pyarrow reads the stream as a stream and the export as a file, the same kinds."""
        import pyarrow as pa

        with pa.ipc.open_file(folder / "ci.arrow") as f:
            exported = f.read_all()["kind"].to_pylist()
        assert kinds(folder) == exported == pa.ipc.open_stream(folder / "ci.aos").read_all()["kind"].to_pylist()

    def test_nanoarrow_does_not_read_the_export(self, folder: Path) -> None:
        """nanoarrow reads IPC streams only: the export, an IPC file, is refused."""
        import nanoarrow as na
        from nanoarrow.ipc import InputStream

        with pytest.raises(Exception, match="get_schema"), InputStream.from_path(folder / "ci.arrow") as stream:
            na.ArrayStream(stream).read_all()

    def test_arro3_reads_the_export_as_a_file(self, folder: Path) -> None:
        """arro3's read_ipc reads the export."""
        from arro3.io import read_ipc

        assert kinds(folder) == read_ipc(folder / "ci.arrow").read_all()["kind"].to_pylist()


class TestRecipes:
    def test_polars(self, folder: Path) -> None:
        """polars reads the stream as is (docs/FORMAT.md recipe)."""
        pytest.importorskip("polars", reason="polars is not installed (large; not in the test extra)")
        assert kinds(folder) == run_python(recipes("python")[0], folder)

    def test_nanoarrow(self, folder: Path) -> None:
        """nanoarrow reads the stream as is (docs/FORMAT.md recipe)."""
        assert kinds(folder) == run_python(recipes("python")[1], folder)

    def test_arro3(self, folder: Path) -> None:
        """arro3 reads the stream as is (docs/FORMAT.md recipe)."""
        assert kinds(folder) == run_python(recipes("python")[2], folder)

    def test_datafusion(self, folder: Path) -> None:
        """DataFusion reads the stream as is (docs/FORMAT.md recipe)."""
        assert kinds(folder) == run_python(recipes("python")[3], folder)

    def test_javascript_with_a_zstd_codec(self, folder: Path) -> None:
        """apache-arrow under node reads the stream with the recipe's zstd codec (aligned copies)."""
        node = node_or_skip()
        (script,) = recipes("js")
        assert kinds(folder) == run_js(node, script, folder)

    def test_javascript_needs_the_aligned_copy(self, folder: Path) -> None:
        """Without the copy (fzstd's output as is) apache-arrow refuses the stream: the recipe's copy is needed."""
        node = node_or_skip()
        (script,) = recipes("js")
        bare = script.replace("new Uint8Array(decompress(data))", "decompress(data)")
        assert bare != script
        with pytest.raises(AssertionError, match="multiple of 8"):
            run_js(node, bare, folder)


def node_or_skip() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (apt-get install nodejs npm); the JavaScript reader is not run")
    if not (JS / "node_modules" / "apache-arrow").is_dir():
        pytest.skip("tests/js has no node_modules (npm ci --prefix tests/js); the JavaScript reader is not run")
    return node


def run_js(node: str, script: str, d: Path) -> list[str]:
    """Run ``script`` under node in ``d`` (packages from tests/js) and parse its last line as JSON."""
    import json

    (d / "node_modules").unlink(missing_ok=True)
    (d / "node_modules").symlink_to(JS / "node_modules")
    (d / "read.mjs").write_text(script, encoding="utf-8")
    done = subprocess.run([node, "read.mjs"], cwd=d, capture_output=True, text=True, timeout=60, check=False)
    assert 0 == done.returncode, done.stderr
    out: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return out
