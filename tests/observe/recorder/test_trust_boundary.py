"""The recorded command is outside the trust boundary (docs/TRUST.md).

Each test runs a hostile command (tests/attacks/swap_stream.py) under a real
``alpha observe gate``: it knows ``$AOS_STREAM``, forges a stream with the same id
whose evidence would pass, and swaps it in, rewrites the file in place, appends to
it or truncates it while it runs, leaving daemons to cover its tracks. None of that
may give a pass: the gate evaluates the events the recorder's writer appended (its
private copy), the seal commits to the bytes the writer wrote, and the sealed
verdict always equals a fresh evaluation of the events before it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from aos.reader import read_stream
from aos.refusals import Refusal
from aos.signing import generate_keypair, load_public_key
from aos.verify import verify_stream
from gates.evaluation import evaluate_events
from gates.registry import resolve_gate
from gates.testing import DEVICE_CONFIG_VARS
from observe.exits import Exit
from tests.helpers.paths import ATTACKS
from tests.helpers.recorder import events, one, output, record
from tests.helpers.run import ALPHA, alpha, child_env
from tests.helpers.workers import RESOURCE_LIMITS

ATTACK = ATTACKS / "swap_stream.py"


def attack(
    tmp_path: Path, mode: str, *, gate: str = "exit-zero", exit_code: int = 1, signed: bool = False
) -> tuple[int, Path, Path | None]:
    """Run the attack under ``gate``; returns the gate's exit code, the stream path and the public key."""
    out = tmp_path / "s.aos"
    done = tmp_path / "attack-done"
    env = {"ATTACK_DONE": str(done), "ALPHA_OBSERVE_DRAIN": "1"}
    if gate in DEVICE_CONFIG_VARS:
        cfg = tmp_path / "lane.json"
        cfg.write_text('{"owner": "ci", "host": "gpu-host", "minors": [0, 1]}')
        env[DEVICE_CONFIG_VARS[gate]] = str(cfg)
    opts: list[str] = []
    pub: Path | None = None
    if signed:
        key, pub = generate_keypair(tmp_path / "k")
        opts = ["--sign-key", str(key)]
    p = alpha(
        "observe",
        "gate",
        gate,
        "--quiet",
        "--out",
        str(out),
        *opts,
        "--",
        sys.executable,
        str(ATTACK),
        mode,
        str(exit_code),
        gate,
        cwd=tmp_path,
        env=env,
    )
    assert p.returncode != 125, p.stderr.decode()
    # Give a surviving daemon its chance to cover the tracks before judging the file (the recorder
    # ends what the command left running, so usually there is none left).
    end = time.monotonic() + 25
    while not done.exists() and time.monotonic() < end and _daemon_may_run(done):
        time.sleep(0.05)
    time.sleep(0.2)
    return p.returncode, out, pub


def _daemon_may_run(done: Path) -> bool:
    """False once the attack's daemon is known to be gone (its pid no longer runs)."""
    pid_file = Path(str(done) + ".pid")
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return True  # not started yet, or a mode without a daemon: wait for the marker
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (the recorder, its subreaper, already gone) counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def sealed_verdict_of(path: Path, pub: Path | None) -> dict[str, Any] | None:
    """The sealed verdict of ``path`` if it verifies (signature included), else None."""
    try:
        verify_stream(path, load_public_key(pub) if pub else None)
    except Refusal:
        return None
    events = read_stream(path).events
    verdicts = [e for e in events if e.kind == "verdict"]
    assert 1 == len(verdicts)
    return {"attrs": verdicts[0].attrs, "events": events, "at": verdicts[0].seq}


def assert_no_pass(tmp_path: Path, code: int, path: Path, pub: Path | None, gate: str) -> None:
    """Neither the gate nor anything left on disk says pass; what verifies agrees with itself."""
    assert 0 != code, "the gate passed a command that forged its stream"
    verdict_cli = alpha("observe", "verdict", str(path), *(["--key", str(pub)] if pub else []), cwd=tmp_path)
    assert 0 != verdict_cli.returncode, verdict_cli.stdout.decode()
    for candidate in (path, path.with_name(path.name + ".real")):
        if not candidate.exists():
            continue
        sealed = sealed_verdict_of(candidate, pub)
        if sealed is None:
            continue
        attrs, events, at = sealed["attrs"], sealed["events"], sealed["at"]
        assert "pass" != attrs["verdict"]
        # the sealed verdict is exactly a fresh evaluation of the events before it
        assert evaluate_events(resolve_gate(gate), events[:at]).to_attrs() == attrs
        exits = [e.attrs["exit_code"] for e in events if e.kind == "process.exit"]
        assert 1 == len(exits)  # the evidence is the recorder's, not the forgery's


class TestStreamSwap:
    """The audit's attack: hard-link aside, rename a forgery onto $AOS_STREAM, rename back later."""

    @pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
    def test_exit_zero(self, tmp_path: Path, signed: bool) -> None:
        """A command that exits 1 and swaps in a forged exit-0 stream fails exit-zero, signed or not."""
        code, path, pub = attack(tmp_path, "swap", signed=signed)
        assert Exit.RESTORED == code  # the path held the forgery: the recorder put its stream back
        assert_no_pass(tmp_path, code, path, pub, "exit-zero")
        sealed = sealed_verdict_of(path, pub)
        assert sealed is not None, "the path must hold the recorder's own stream, and it verifies"
        assert "fail" == sealed["attrs"]["verdict"]
        exit_event = next(e for e in sealed["events"] if e.kind == "process.exit")
        assert 1 == exit_event.attrs["exit_code"]

    @pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
    def test_device_gate(self, tmp_path: Path, signed: bool) -> None:
        """A command that ran nothing and swaps in a forged right lane is not a pass of distributed-device."""
        code, path, pub = attack(tmp_path, "swap", gate="distributed-device", exit_code=0, signed=signed)
        assert_no_pass(tmp_path, code, path, pub, "distributed-device")


class TestFileEditedWhileRecording:
    def test_in_place_overwrite_restored_later(self, tmp_path: Path) -> None:
        """The same inode rewritten with a forgery, and put back after the seal: no pass."""
        code, path, pub = attack(tmp_path, "overwrite")
        assert Exit.RESTORED == code
        assert_no_pass(tmp_path, code, path, pub, "exit-zero")

    def test_appended_forgery(self, tmp_path: Path) -> None:
        """Batches of a forgery appended to the file while it is written: no pass, and the path ends up holding
        the recorder's stream (put back, unless the writer's own later batches covered the appended bytes)."""
        code, path, pub = attack(tmp_path, "append")
        restored = path.with_name(path.name + ".foreign-1").exists()
        assert (Exit.RESTORED if restored else 1) == code
        assert_no_pass(tmp_path, code, path, pub, "exit-zero")
        verify_stream(path)

    def test_truncated_while_recording(self, tmp_path: Path) -> None:
        """The file truncated under the writer: the recorder puts its stream back (fail); the truncated file, kept
        aside, does not verify."""
        code, path, pub = attack(tmp_path, "truncate")
        assert Exit.RESTORED == code
        assert_no_pass(tmp_path, code, path, pub, "exit-zero")
        verify_stream(path)
        with pytest.raises(Refusal):
            verify_stream(path.with_name(path.name + ".foreign-1"))

    def test_device_gate_overwrite(self, tmp_path: Path) -> None:
        """An in-place forgery of a right lane under coordinate-device: no pass."""
        code, path, pub = attack(tmp_path, "overwrite", gate="coordinate-device", exit_code=0)
        assert_no_pass(tmp_path, code, path, pub, "coordinate-device")


PROBE = (
    "import os\n"
    "recorder = f'/proc/{os.getppid()}'\n"
    "for probe in (lambda: os.listdir(f'{recorder}/fd'), lambda: open(f'{recorder}/environ').read()):\n"
    "    try:\n"
    "        probe()\n"
    "        print('readable')\n"
    "    except PermissionError:\n"
    "        print('denied')\n"
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_DUMPABLE is Linux's")
def test_recorder_makes_itself_not_dumpable(tmp_path: Path) -> None:
    """While it records, the recorder is not dumpable (PR_GET_DUMPABLE is 0), so no same-user ptrace or /proc/PID/fd."""
    code = (
        "import ctypes, sys\n"
        "from pathlib import Path\n"
        "from observe.recorder.record import RecordOptions, record\n"
        "seen = []\n"
        "libc = ctypes.CDLL(None)\n"
        "record(['true'], RecordOptions(out=Path(sys.argv[1]), quiet=True),"
        " before_seal=lambda w: seen.append(libc.prctl(3, 0, 0, 0, 0)))\n"
        "print(seen)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "d.aos")], capture_output=True, timeout=60, check=False
    )
    assert 0 == p.returncode, p.stderr.decode()
    assert b"[0]" == p.stdout.strip()


@RESOURCE_LIMITS  # as the same unprivileged user as the resource tests' limited processes
def test_command_of_another_user_cannot_open_the_recorders_descriptors(tmp_path: Path) -> None:
    """Recorder and command as one unprivileged user: the command can neither list /proc/RECORDER/fd nor read
    /proc/RECORDER/environ (where the key of --sign-key-env is)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root to drop to an unprivileged user with setpriv")
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    reach = subprocess.run([*nobody, ALPHA, "--version"], capture_output=True, timeout=60, check=False)
    python = shutil.which("python3", path="/usr/bin:/bin")
    if reach.returncode != 0 or python is None:
        pytest.skip("this installation of alpha (or a system python3) cannot run as an unprivileged user")
    shared = Path(tempfile.mkdtemp(prefix="aos-nobody-"))  # pytest's own tmp is root's alone
    try:
        shared.chmod(0o777)
        key, _ = generate_keypair(tmp_path / "k")
        p = subprocess.run(
            [
                *nobody,
                ALPHA,
                "observe",
                "record",
                "--sign-key-env",
                "SEAL_KEY",
                "--out",
                str(shared / "d.aos"),
                "--",
                python,
                "-c",
                PROBE,
            ],
            capture_output=True,
            timeout=60,
            check=False,
            cwd=shared,
            env=child_env({"SEAL_KEY": key.read_text()}),
        )
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    assert 0 == p.returncode, p.stderr.decode()
    assert b"denied\ndenied\n" == p.stdout


class TestSigningKeyKeptFromTheCommand:
    """A command that holds the seal's key can sign a stream of its own, so the key must not reach it.

    ``--sign-key-env NAME`` takes the key from a variable the command's environment never has, and
    ``--sign-key`` takes a pipe (whose descriptor the command does not inherit) as well as a file.
    """

    #: The command looks everywhere the recorder could have left the key: its environment, inherited
    #: descriptors (pipes) and the key file's path.
    HUNT = (
        'echo "env:${SEAL_KEY:-absent}"; env | grep -c "PRIVATE KEY" || true; '
        'for fd in /proc/self/fd/*; do n=${fd##*/}; [ "$n" -gt 2 ] && [ -p "$fd" ] && echo "pipe:$n"; done; true'
    )

    def test_from_the_environment(self, tmp_path: Path) -> None:
        key, pub = generate_keypair(tmp_path / "k")
        pem = key.read_text()
        proc, path = record(tmp_path, ["sh", "-c", self.HUNT], "--sign-key-env", "SEAL_KEY", env={"SEAL_KEY": pem})
        assert 0 == proc.returncode, proc.stderr
        assert b"env:absent\n0\n" == output(events(path))
        v = verify_stream(path, load_public_key(pub))
        assert (True, True) == (v.signed, v.signature_checked)
        opened = one(events(path), "stream.open").attrs
        assert "SEAL_KEY" not in opened["env"]  # the command's environment never had it
        body = "".join(pem.splitlines()[1:-1])
        raw = b"".join(e.attrs_json.encode() + (e.data or b"") for e in events(path))
        assert body[:40].encode() not in raw
        assert b"the signing key is a file" not in proc.stderr

    def test_from_a_pipe(self, tmp_path: Path) -> None:
        key, pub = generate_keypair(tmp_path / "k")
        out = tmp_path / "p.aos"
        script = f"exec \"$0\" observe record --sign-key <(cat {key}) --out {out} -- sh -c '{self.HUNT}'"
        proc = subprocess.run(["bash", "-c", script, ALPHA], capture_output=True, timeout=60, check=False)
        assert 0 == proc.returncode, proc.stderr
        assert b"pipe:" not in output(events(out))  # the key's pipe was not handed down
        assert verify_stream(out, load_public_key(pub)).signature_checked
        assert b"the signing key is a file" not in proc.stderr

    def test_a_key_file_is_named_as_readable_by_the_command(self, tmp_path: Path) -> None:
        key, _ = generate_keypair(tmp_path / "k")
        proc, _ = record(tmp_path, ["true"], "--sign-key", str(key))
        assert 0 == proc.returncode, proc.stderr
        assert b"the signing key is a file the recorded command can read" in proc.stderr

    def test_missing_variable_and_silent_pipe_are_refused_before_running(self, tmp_path: Path) -> None:
        marker = tmp_path / "ran"
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)  # nobody writes to it: empty at once, never a wait
        for opts in (["--sign-key-env", "NO_SUCH_KEY"], ["--sign-key", str(fifo)]):
            proc, _ = record(tmp_path, ["touch", str(marker)], *opts, env={"NO_SUCH_KEY": ""}, timeout=30)
            assert (125, b"refused: stream-signature: ") == (proc.returncode, proc.stderr[:27])
            assert not marker.exists()

    def test_both_forms_at_once_is_a_usage_error(self, tmp_path: Path) -> None:
        key, _ = generate_keypair(tmp_path / "k")
        proc, _ = record(tmp_path, ["true"], "--sign-key", str(key), "--sign-key-env", "X")
        assert 2 == proc.returncode
        assert b"give the signing key once" in proc.stderr


# -- the tool's own files, while the recorder holds a node's observer key ------------------------------------


def test_an_observer_key_holding_recorder_never_imports_what_the_command_rewrote(tmp_path: Path) -> None:
    """The command rewrites every module of the tool it can write (here a copy of the tool's packages on
    ``PYTHONPATH``, as a venv inside the project is) to drop a marker when imported. A recorder holding a node's
    observer key (``--observer-key-env``) imports its own modules before the command starts
    (observe.recorder.preload), so none of what the command wrote runs in it, though ``gate`` evaluates after
    the command ended."""
    root = Path(__file__).resolve().parents[3]
    tool = tmp_path / "tool"
    for package in ("aos", "gates", "observe"):
        shutil.copytree(root / package, tool / package, ignore=shutil.ignore_patterns("__pycache__"))
    marker = tmp_path / "ran-in-recorder"
    plant = tmp_path / "plant.py"
    planted = f"\nopen({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    plant.write_text(
        "import pathlib, sys\n"
        "for f in pathlib.Path(sys.argv[1]).rglob('*.py'):\n"
        f"    f.write_text(f.read_text() + {planted!r})\n"
    )
    env = {**child_env(), "PYTHONPATH": str(tool), "OBSERVER_KEY": "not-a-key-no-node-is-named"}
    done = subprocess.run(
        [ALPHA, "observe", "gate", "exit-zero", "--quiet", "--observer-key-env", "OBSERVER_KEY",
         "--out", str(tmp_path / "s.aos"), "--", sys.executable, str(plant), str(tool)],
        env=env, cwd=tmp_path, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == Exit.OK, done.stderr.decode(errors="replace")
    assert not marker.exists(), f"modules the command rewrote ran in the recorder: {marker.read_text()}"
