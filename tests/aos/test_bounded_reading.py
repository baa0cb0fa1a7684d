"""Every reader of untrusted streams stays under 200 MB peak RSS on decompression bombs, refusing by name.

Two bombs: ``tests/assets/bomb-512m.aos``, a sealed stream whose one stdout event is 512 MiB of
zeros (about 20 KB at zstd level 19, written by the writer before v1's batch bound), refused as
``stream-chain`` before anything is inflated; and a sealed stream at the bound, 64 batches of
one event of zeros each as large as a v1 writer writes (256 MiB in all), which every reader
reads (or refuses for its own reasons) holding about one batch, never the stream.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from blake3 import blake3

from aos.framing import MAX_BATCH_BYTES, MAX_EVENT_BYTES
from aos.verify import verify_stream
from aos.writer import StreamWriter
from gates.testing import SyntheticStream
from tests.helpers.paths import ASSETS, ROOT

LIMIT_MIB = 200
#: The events of the stream at the bound: each this many bytes of zeros.
AT_BOUND_EVENTS = 64
AT_BOUND_DATA = MAX_EVENT_BYTES - 1024
LANE = "exit-zero"


def at_bound_stream(path: Path) -> Path:
    """A sealed stream of a command that printed 64 chunks of zeros, each as large as a v1 event may be,
    with the verdict its gate really gives (so that attest re-derives it)."""
    s = SyntheticStream(gate=LANE)
    zeros = bytes(AT_BOUND_DATA)
    for _ in range(AT_BOUND_EVENTS):
        s.output("stdout", zeros)
    s.exit(0)
    s.add("verdict", s.evaluate(LANE).to_attrs())
    s.write(path)
    return path


@dataclass
class Bombs:
    """The bomb streams and a tracker and a store holding them."""

    root: Path
    streams: dict[str, Path]
    stores: dict[str, str]
    trackers: dict[str, Path]
    empty: dict[str, Path]
    runs: dict[str, str]


def _tracker(root: Path, name: str, stream: Path, good: bool) -> tuple[Path, Path, str]:
    """A tracker whose one run's stream is ``stream`` (a good stream attached, then replaced by it when bad),
    and a tracker with one run and no stream yet (and that run's id)."""
    from tracker import records
    from tracker.attach import attach
    from tracker.db import init
    from tracker.testing import sealed_stream

    db = root / f"{name}.sqlite3"
    conn = init(db)
    attached = root / f"attached-{name}.aos"
    run = records.start_run(conn, lane=LANE, started_at_ns=1)
    if good:
        shutil.copy(stream, attached)
    else:
        sealed_stream(attached, gate=LANE)
    attach(conn, attached, run)
    if not good:
        shutil.copy(stream, attached)
    conn.close()
    empty = root / f"empty-{name}.sqlite3"
    conn = init(empty)
    fresh = records.start_run(conn, lane=LANE, started_at_ns=1)
    conn.close()
    return db, empty, fresh


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> Bombs:
    """The two bombs, each in a store and in a tracker, and an empty tracker for each to be imported into."""
    from tracker.db import init

    root = tmp_path_factory.mktemp("bombs")
    streams = {"format": root / "bomb-512m.aos", "at-bound": at_bound_stream(root / "at-bound.aos")}
    shutil.copy(ASSETS / "bomb-512m.aos", streams["format"])
    stores: dict[str, str] = {}
    trackers: dict[str, Path] = {}
    empty: dict[str, Path] = {}
    runs: dict[str, str] = {}
    for name, path in streams.items():
        store = root / f"store-{name}"
        store.mkdir()
        digest = blake3(path.read_bytes()).hexdigest()
        shutil.copy(path, store / f"{digest}.aos")
        stores[name] = (store / f"{digest}.aos").as_uri()
        trackers[name], empty[name], runs[name] = _tracker(root, name, path, name == "at-bound")
        (root / f"out-{name}").mkdir()
        init(root / f"out-{name}" / "imported.sqlite3").close()
    return Bombs(root, streams, stores, trackers, empty, runs)


def test_the_bound_stream_is_what_a_v1_writer_writes(bombs: Bombs) -> None:
    """The stream at the bound verifies: the writer cuts batches inside the bound the readers check."""
    v = verify_stream(bombs.streams["at-bound"])
    assert (AT_BOUND_EVENTS + 5, "pass") == (v.events - v.checkpoints, (v.verdict or {}).get("verdict"))
    assert bombs.streams["at-bound"].stat().st_size < 100_000 < AT_BOUND_EVENTS * AT_BOUND_DATA
    assert AT_BOUND_DATA * 2 > MAX_BATCH_BYTES


def test_the_writer_refuses_an_event_beyond_the_bound(tmp_path: Path) -> None:
    """An event larger than a v1 event may be is refused by the writer (a caller's error), the stream unharmed."""
    with StreamWriter(tmp_path / "s.aos", background_flush=False) as w:
        with pytest.raises(ValueError, match="a v1 event holds at most"):
            w.append("stdout", {}, data=bytes(MAX_EVENT_BYTES + 1))
        w.append("stdout", {}, data=b"ok\n")
        w.seal()
    assert 2 == verify_stream(tmp_path / "s.aos").events


def _commands(b: Bombs, name: str) -> dict[str, list[str]]:
    s, out = str(b.streams[name]), b.root / f"out-{name}"
    out.mkdir(exist_ok=True)
    db = str(b.trackers[name])
    return {
        "verify": ["observe", "verify", s],
        "read": ["observe", "read", s],
        "read-stdout": ["observe", "read", "--stdout", s],
        "show": ["observe", "show", s],
        "report": ["observe", "report", s, "-o", str(out / "report.html")],
        "query": ["observe", "query", "SELECT count(*), sum(octet_length(data)) FROM events", s],
        "export-otlp": ["observe", "export", s, "--format", "otlp", "-o", str(out / "trace.json")],
        "export-asciicast": ["observe", "export", s, "--format", "asciicast", "-o", str(out / "cast.json")],
        "attest": ["observe", "attest", s, "--attester-id", "urn:test:a", "-o", str(out / "attestation.json")],
        "fetch": ["observe", "fetch", b.stores[name], "-o", str(out / "fetched.aos")],
        "attach": ["observe", "attach", s, "--tracker", str(b.empty[name]), "--run", b.runs[name]],
        "audit": ["tracker", "--db", db, "audit"],
        "site": ["tracker", "--db", db, "site", str(out / "site")],
        "import": ["tracker", "--db", str(out / "imported.sqlite3"), "import", db],
    }


#: Every reader of untrusted streams, as ``_commands`` runs it.
READERS = (
    "verify",
    "read",
    "read-stdout",
    "show",
    "report",
    "query",
    "export-otlp",
    "export-asciicast",
    "attest",
    "fetch",
    "attach",
    "audit",
    "site",
    "import",
)


#: Runs argv[1:] and prints its exit code and peak RSS in KiB. The pytest process may be large, and a
#: child's ``ru_maxrss`` starts at its parent's high-water mark (Linux keeps it across exec): this
#: small process forks the reader, so the reader's peak is its own.
MEASURE = """
import os, sys
pid = os.fork()
if pid == 0:
    os.dup2(os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


#: Readers that report a damaged stream and exit 0: report describes it (its integrity line), query
#: skips it (and says so), site shows it damaged; every other reader refuses it (exit 1).
SAY_AND_GO_ON = frozenset({"report", "query", "site"})


def peak_rss(argv: list[str], cwd: Path, stdout: str = os.devnull) -> tuple[int, float, str]:
    """Run ``alpha ARGV`` in a process of its own, its stdout to ``stdout``: its exit code, peak RSS in MiB
    (ru_maxrss), and its stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    entry = "import sys; from observe.cli.entry import main; sys.argv[0] = 'alpha'; sys.exit(main())"
    proc = subprocess.run(
        [sys.executable, "-c", MEASURE, stdout, sys.executable, "-c", entry, *argv],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=True,
    )
    code, kib = proc.stdout.decode().split()[-2:]
    return int(code), int(kib) / 1024, proc.stderr.decode("utf-8", "replace")


@pytest.mark.parametrize("reader", READERS)
def test_a_format_bomb_is_refused_by_name_in_bounded_memory(bombs: Bombs, reader: str) -> None:
    """A batch declaring 512 MiB uncompressed is refused as stream-chain before it is inflated."""
    out = bombs.root / f"stdout-{reader}"
    code, rss, err = peak_rss(_commands(bombs, "format")[reader], bombs.root, str(out))
    assert rss < LIMIT_MIB, (reader, rss, err[-2000:])
    said = out.read_text(errors="replace") + err
    if reader == "site":  # the file is not the one attached (its digest differs): damaged, never inflated
        pages = sorted((bombs.root / "out-format" / "site").rglob("*.html"))
        assert any("damaged" in page.read_text() for page in pages)
    else:
        assert "stream-chain" in said, (reader, said[-2000:])
    assert (0 if reader in SAY_AND_GO_ON else 1) == code, (reader, said[-2000:])


@pytest.mark.parametrize("reader", READERS)
def test_a_stream_at_the_bound_is_read_in_bounded_memory(bombs: Bombs, reader: str) -> None:
    """A valid stream of 256 MiB of zeros in a few KB is read holding about one batch, not the stream."""
    code, rss, err = peak_rss(_commands(bombs, "at-bound")[reader], bombs.root)
    assert rss < LIMIT_MIB, (reader, rss, err[-2000:])
    assert 0 == code, (reader, err[-2000:])


#: Verify a good stream for a query, swap the file for the bomb before the scan re-reads it, query.
SWAPPED = """
import shutil, sys
from pathlib import Path
from aos.refusals import Refusal
from observe.query import sources
from observe.query.run import open_sources, query_sources
sources.SMALL_STREAM = 0  # no batches kept: the scan re-reads the file
found, _ = open_sources([Path(sys.argv[1])])
shutil.copy(sys.argv[2], sys.argv[1])
try:
    query_sources("SELECT count(*) FROM events", found)
except Refusal as exc:
    sys.exit(exc.diagnostics())
"""


def test_a_stream_swapped_for_a_bomb_under_a_query_is_not_inflated(tmp_path: Path) -> None:
    """A stream replaced by a bomb between its verification and the scan stops the query before inflating."""
    stream = tmp_path / "s.aos"
    shutil.copy(ASSETS / "good.aos", stream)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            MEASURE,
            os.devnull,
            sys.executable,
            "-c",
            SWAPPED,
            str(stream),
            str(ASSETS / "bomb-512m.aos"),
        ],
        env=env,
        capture_output=True,
        check=True,
    )
    code, kib = proc.stdout.decode().split()[-2:]
    assert (1, True) == (int(code), int(kib) < LIMIT_MIB * 1024), (kib, proc.stderr[-2000:])
    err = proc.stderr.decode()
    assert "refused: stream-seal: " in err
    assert "changed after it was verified" in err
