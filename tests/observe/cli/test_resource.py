"""A machine out of threads, memory, descriptors or disk is the tool's own failure (``resource``), never damage.

Each limit is injected in a process of its own: threads with ``RLIMIT_NPROC`` as an unprivileged user
(the limit does not bind root), memory with ``RLIMIT_AS`` and descriptors with ``RLIMIT_NOFILE`` set
just above what the started tool holds, and a full disk as a tmpfs of 2 MiB, filled. The readers
(verify, show, report) start no thread at all: out of threads, they still read.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from aos.resources import machine_error
from aos.verify import verify_stream
from tests.aos.test_bounded_reading import AT_BOUND_DATA, at_bound_stream
from tests.helpers.accounts import ensure, per_worker
from tests.helpers.paths import ROOT
from tests.helpers.run import alpha, child_env
from tests.helpers.workers import RESOURCE_LIMITS

#: Loads the tool, then sets the limit KIND (with EXTRA bytes of address space) and runs ``alpha ARGS``.
#: ``threads`` sets RLIMIT_NPROC before anything loads to the threads the (unprivileged) user holds, so
#: that no new one starts, however many cores the machine has or other processes the user runs.
DRIVER = """
import os, resource, sys
kind, extra = sys.argv[1], int(sys.argv[2])
if kind == "threads":  # before anything loads: as the tool starts on a machine out of threads
    uid, held = os.getuid(), 0  # every thread this user runs now (other tests may run some): no new one
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status"))
        except OSError:
            continue
        if int(status["Uid"].split()[0]) == uid:
            held += int(status["Threads"])
    resource.setrlimit(resource.RLIMIT_NPROC, (held, held))
else:
    import pyarrow, pyarrow.ipc, blake3, click
    import aos.reader, aos.verify, observe.cli.entry, observe.cli.options, observe.cli.root
    import observe.readback.summary, observe.refusals, observe.util.allocator
if kind == "memory":
    vm = int([l for l in open("/proc/self/status") if l.startswith("VmSize")][0].split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + extra, resource.RLIM_INFINITY))
elif kind == "descriptors":
    free = os.open(os.devnull, os.O_RDONLY)
    os.close(free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (free, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
sys.argv = ["alpha", *sys.argv[3:]]
from observe.cli.entry import main
main()
"""

#: As ``DRIVER``, but reading the recorder's private copy back fails for want of a thread after one event.
STARVED_READBACK = """
import sys
from aos.writer import StreamWriter
real = StreamWriter.iter_written_events
def starved(self, *args, **kwargs):
    for n, ev in enumerate(real(self, *args, **kwargs)):
        if n == 1:
            raise RuntimeError("can't start new thread")
        yield ev
StreamWriter.iter_written_events = starved
sys.argv = ["alpha", *sys.argv[1:]]
from observe.cli.entry import main
main()
"""

#: One worker runs them all: see RESOURCE_LIMITS.
pytestmark = RESOURCE_LIMITS

#: The thread limit counts every thread of the limited process's user: an account of this worker's alone
#: (tests.helpers.accounts), never ``nobody``, whom the suite's PostgreSQL servers run as.
LIMITED_USER = "aos-limits"


def unprivileged() -> list[str]:
    """``setpriv`` to this worker's limited account, keeping the right to read root's tree (as root's tests do)."""
    account = ensure(per_worker(LIMITED_USER))
    return [
        "setpriv",
        f"--reuid={account.pw_uid}",
        f"--regid={account.pw_gid}",
        "--clear-groups",
        "--inh-caps=+dac_read_search",  # to read the interpreter and the tree under /root
        "--ambient-caps=+dac_read_search",
    ]


def _threads_possible() -> bool:
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


def limited(kind: str, *args: str, extra: int = 0) -> subprocess.CompletedProcess[str]:
    """``alpha ARGS`` under the limit KIND (``none`` for none), as text."""
    prefix = unprivileged() if kind == "threads" else []
    env = child_env({"PYTHONPATH": str(ROOT)})
    argv = [*prefix, sys.executable, "-c", DRIVER, kind, str(extra), *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    """A folder any user reaches and writes to (pytest's own are root's alone), removed at the end."""
    folder = Path(tempfile.mkdtemp(prefix="aos-resource-"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def good(shared: Path) -> Path:
    """A sealed stream of a few batches of 4 MiB events (readable by any user)."""
    path = at_bound_stream(shared / "good.aos")
    path.chmod(0o644)
    return path


@pytest.fixture
def out(shared: Path, request: pytest.FixtureRequest) -> Path:
    """An empty folder of this test's own in ``shared``, writable by any user."""
    folder = shared / request.node.name.replace("[", "-").replace("]", "")
    folder.mkdir()
    folder.chmod(0o777)
    return folder


LIMITS = {
    # One event's size: room for verify's own work, never for a batch of such events to inflate.
    "memory": {"extra": AT_BOUND_DATA},
    "descriptors": {},
}


@pytest.mark.parametrize("kind", sorted(LIMITS))
def test_verify_under_a_limit_says_resource_and_passes_without_it(good: Path, kind: str) -> None:
    """verify of a good stream under the limit is refused as resource (exit 1), never as damage; it verifies after."""
    proc = limited(kind, "observe", "verify", str(good), **LIMITS[kind])
    assert (1, "refused: resource: ") == (proc.returncode, proc.stderr[proc.stderr.find("refused:") :][:19]), (
        proc.stderr
    )
    assert "stream-" not in proc.stderr
    assert 0 == limited("none", "observe", "verify", str(good)).returncode


@pytest.mark.parametrize("command", ["verify", "show", "report"])
def test_readers_need_no_new_thread(good: Path, out: Path, command: str) -> None:
    """verify, show and report decode every batch on their own thread (never pyarrow's pool, where a failed
    allocation aborts the process): with no thread to be had they print what they print without the limit."""
    if not _threads_possible():
        pytest.skip("RLIMIT_NPROC needs an unprivileged user: setpriv as root")
    args = {
        "verify": ["verify", str(good)],
        "show": ["show", str(good)],
        "report": ["report", str(good), "-o", str(out / "r.html")],
    }[command]
    proc = limited("threads", "observe", *args)
    assert 0 == proc.returncode, proc.stderr
    free = limited("none", "observe", *args)
    assert (0, free.stdout) == (free.returncode, proc.stdout)
    assert "refused" not in proc.stderr


def test_query_under_a_thread_limit_says_resource(good: Path) -> None:
    """query (DuckDB starts its threads) refuses as resource when no thread can be started, never calls the
    stream damaged."""
    if not _threads_possible():
        pytest.skip("RLIMIT_NPROC needs an unprivileged user: setpriv as root")
    proc = limited("threads", "observe", "query", "SELECT count(*) FROM events", str(good))
    assert 1 == proc.returncode, proc.stderr
    assert "refused: resource: no thread could be started" in proc.stderr
    assert "damaged" not in proc.stdout + proc.stderr
    assert "stream-chain" not in proc.stderr


@pytest.mark.parametrize("command", ["record", "gate"])
def test_record_and_gate_under_a_thread_limit_exit_125(out: Path, command: str) -> None:
    """record and gate that cannot start their threads refuse as resource with the recorder's 125."""
    if not _threads_possible():
        pytest.skip("RLIMIT_NPROC needs an unprivileged user: setpriv as root")
    lane = ["exit-zero"] if command == "gate" else []
    proc = limited("threads", "observe", command, *lane, "--out", str(out / "s.aos"), "--", "true")
    assert 125 == proc.returncode, proc.stderr
    assert "refused: resource: no thread could be started" in proc.stderr


def test_a_gate_whose_readback_lacks_a_thread_seals_inconclusive_naming_the_tool(tmp_path: Path) -> None:
    """A gate whose read-back of its events fails for want of a thread seals inconclusive ``resource``, exits 125."""
    stream = tmp_path / "s.aos"
    env = child_env({"PYTHONPATH": str(ROOT)})
    argv = [sys.executable, "-c", STARVED_READBACK, "observe", "gate", "exit-zero", "--out", str(stream), "--", "true"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert 125 == proc.returncode, proc.stderr
    verdict = verify_stream(stream).verdict or {}
    checks = [(c["name"], c["status"]) for c in verdict.get("checks", [])]
    assert ("inconclusive", [("resource", "inconclusive")]) == (verdict.get("verdict"), checks)
    reason = verdict["checks"][0]["reason"]
    assert reason.startswith("the tool's own failure, not the stream's: no thread could be started")
    assert "damaged" not in json.dumps(verdict)
    assert "stream-readback" not in json.dumps(verdict)


def _fill(path: Path) -> None:
    """Write zeros to ``path`` until its filesystem is full."""
    with path.open("ab") as f:
        try:
            while True:
                f.write(bytes(1 << 16))
                f.flush()
        except OSError as exc:
            if exc.errno != 28:  # ENOSPC
                raise


def test_a_full_disk_is_a_write_failure_not_damage(tmp_path: Path) -> None:
    """record onto a full filesystem ends in the recorder's 125, report onto one says the disk is full: no damage."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace')}")
    try:
        _fill(disk / "filler")
        rec = alpha("observe", "record", "--out", str(disk / "s.aos"), "--", "sh", "-c", "head -c 3000000 /dev/urandom")
        assert 125 == rec.returncode, rec.stderr[-2000:]
        assert b"stream-chain" not in rec.stderr
        good = tmp_path / "good.aos"
        assert 0 == alpha("observe", "record", "--out", str(good), "--", "true").returncode
        rep = alpha("observe", "report", str(good), "-o", str(disk / "r.html"))
        assert (1, True) == (rep.returncode, b"No space left on device" in rep.stderr), rep.stderr
        assert b"damaged" not in rep.stderr
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_words_of_a_machine_error_in_what_the_command_says_change_nothing(tmp_path: Path) -> None:
    """A command that prints and receipts the words of a thread failure still passes its gate: only the tool's
    own errors are the machine's."""
    words = "Failed to launch worker thread: Resource temporarily unavailable; can't start new thread"
    script = tmp_path / "say.py"
    receipt = json.dumps({"name": words, "status": "fail"})
    script.write_text(
        f"import os, sys\nprint({words!r}, file=sys.stderr)\n"
        f"open(os.environ['AOS_RECEIPTS'], 'a').write({receipt!r} + '\\n')\n"
    )
    proc = alpha("observe", "gate", "exit-zero", "--out", str(tmp_path / "s.aos"), "--", sys.executable, str(script))
    assert 0 == proc.returncode, proc.stderr[-2000:]
    assert "pass" == (verify_stream(tmp_path / "s.aos").verdict or {}).get("verdict")


def test_only_the_libraries_words_are_classified() -> None:
    """The classifier names errors of the machine by type, and by message only for the libraries' own errors."""
    assert "no memory could be had" == machine_error(MemoryError())
    assert "the disk is full" == machine_error(OSError(28, "No space left on device"))
    assert "no thread could be started" == machine_error(RuntimeError("can't start new thread"))
    assert None is machine_error(ValueError("Failed to launch worker thread"))
    assert None is machine_error(OSError(2, "No such file or directory"))
    wrapped = ValueError("wrapped")
    wrapped.__cause__ = MemoryError()
    assert "no memory could be had" == machine_error(wrapped)
