"""The path holds the recorder's stream (docs/TRUST.md, observe/recorder/outpath.py).

Whatever the recorded command leaves at ``$AOS_STREAM`` (a sealed forgery with a
``pass`` verdict renamed onto it, an in-place edit, nothing, a folder, a symbolic
link, a FIFO), once the recording ends the path holds the recorder's own stream:
``verify`` passes, ``verdict PATH`` reads the recorder's verdict, what the command
left is kept as ``PATH.foreign-1`` and the recording exits 123.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from aos.reader import read_stream
from aos.refusals import Refusal
from aos.signing import load_public_key
from aos.verify import verify_stream
from gates.evaluation import evaluate_events
from gates.registry import resolve_gate
from observe.exits import Exit
from tests.helpers.recorder import events, one, record
from tests.helpers.run import alpha
from tests.observe.recorder.test_trust_boundary import attack


def foreign(path: Path) -> Path:
    """Where the recorder keeps what it found at ``path``."""
    return path.with_name(path.name + ".foreign-1")


def verdict_cli(tmp_path: Path, path: Path, pub: Path | None) -> tuple[int, dict[str, object]]:
    """``alpha observe verdict PATH --json`` (with ``--key`` when signed): its exit code and document."""
    p = alpha("observe", "verdict", str(path), "--json", *(["--key", str(pub)] if pub else []), cwd=tmp_path)
    return p.returncode, json.loads(p.stdout) if p.stdout.strip() else {}


def assert_recorders_stream(path: Path, pub: Path | None, gate: str, command_exit: int) -> dict[str, object]:
    """The path verifies (signature too) and holds the recorder's events and a verdict equal to a fresh
    evaluation of them; returns that verdict's attrs."""
    verify_stream(path, load_public_key(pub) if pub else None)
    evs = read_stream(path).events
    verdict = one(evs, "verdict")
    assert evaluate_events(resolve_gate(gate), evs[: verdict.seq]).to_attrs() == verdict.attrs
    assert command_exit == one(evs, "process.exit").attrs["exit_code"]
    assert len(one(evs, "stream.open").attrs["argv"]) > 1  # the recorder's own stream.open, naming the attack
    return dict(verdict.attrs)


class TestForgeryPlantedAtThePath:
    """The audit's finding: a sealed forgery saying ``pass`` renamed onto the path, the real stream linked aside."""

    @pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
    def test_exit_zero(self, tmp_path: Path, signed: bool) -> None:
        """Under exit-zero the path ends up holding the recorder's fail, the forgery is kept aside, exit 123."""
        code, path, pub = attack(tmp_path, "plant", signed=signed)
        assert Exit.RESTORED == code
        attrs = assert_recorders_stream(path, pub, "exit-zero", 1)
        assert "fail" == attrs["verdict"]
        assert (Exit.FAIL, "fail") == (lambda r: (r[0], r[1].get("verdict")))(verdict_cli(tmp_path, path, pub))
        kept = foreign(path)
        assert "pass" == one(read_stream(kept).events, "verdict").attrs["verdict"]  # the forgery, kept as it was
        if pub is not None:
            with pytest.raises(Refusal):
                verify_stream(kept, load_public_key(pub))

    @pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
    def test_device_gate(self, tmp_path: Path, signed: bool) -> None:
        """Under distributed-device the path ends up holding the recorder's own verdict (no pass), exit 123."""
        code, path, pub = attack(tmp_path, "plant", gate="distributed-device", exit_code=0, signed=signed)
        assert Exit.RESTORED == code
        attrs = assert_recorders_stream(path, pub, "distributed-device", 0)
        assert "pass" != attrs["verdict"]
        rc, doc = verdict_cli(tmp_path, path, pub)
        assert (attrs["verdict"], {"fail": Exit.FAIL, "inconclusive": Exit.INCONCLUSIVE}[str(attrs["verdict"])]) == (
            doc["verdict"],
            rc,
        )
        assert "pass" == one(read_stream(foreign(path)).events, "verdict").attrs["verdict"]

    def test_said_on_stderr_and_in_json(self, tmp_path: Path) -> None:
        """``record --json`` says the path was restored and where the foreign file went; stderr says what was done."""
        out = tmp_path / "s.aos"
        script = "import os; p = os.environ['AOS_STREAM']; os.rename(p, p + '.aside'); open(p, 'wb').write(b'forged')"
        p = alpha("observe", "record", "--json", "--out", str(out), "--", sys.executable, "-c", script, cwd=tmp_path)
        assert Exit.RESTORED == p.returncode
        doc = json.loads(p.stdout)
        assert (True, str(foreign(out)), 0) == (doc["path_restored"], doc["foreign"], doc["command_exit"])
        assert b"forged" == foreign(out).read_bytes()
        err = p.stderr.decode()
        assert f"the command changed the stream file {out}: another file is there" in err
        assert f"put its own stream back at {out}; what was there is kept as {foreign(out)}" in err
        verify_stream(out)


def changed(tmp_path: Path, script: str) -> tuple[int, Path, str]:
    """Record ``sh -c SCRIPT`` (``$AOS_STREAM`` is the path); its exit code, the path and its stderr."""
    p, out = record(tmp_path, ["sh", "-c", script], "--quiet", cwd=tmp_path)
    return p.returncode, out, p.stderr.decode()


class TestPathChangedOtherwise:
    """Edited in place, deleted, or something other than a file left there: the stream comes back."""

    def test_in_place_edit(self, tmp_path: Path) -> None:
        """Bytes overwritten in the same file (same inode): the recorder's stream comes back, the edit is kept aside."""
        script = (
            "import os; fd = os.open(os.environ['AOS_STREAM'], os.O_WRONLY); os.pwrite(fd, b'edited!!', 0); "
            "print('done')"
        )
        p, out = record(tmp_path, [sys.executable, "-c", script], "--quiet", cwd=tmp_path)
        assert Exit.RESTORED == p.returncode
        assert b"edited in place" in p.stderr
        assert b"done\n" == b"".join(e.data or b"" for e in events(out) if e.kind == "stdout")
        assert foreign(out).read_bytes().startswith(b"edited!!")
        with pytest.raises(Refusal):
            verify_stream(foreign(out))

    def test_same_size_edit_is_seen(self, tmp_path: Path) -> None:
        """An edit that keeps the size is found by the digest, not by the size or the inode."""
        script = "printf 'xx' | dd of=\"$AOS_STREAM\" bs=1 seek=8 conv=notrunc status=none"
        code, out, err = changed(tmp_path, script)
        assert Exit.RESTORED == code
        assert "edited in place" in err
        verify_stream(out)

    def test_deleted(self, tmp_path: Path) -> None:
        """The path removed: the stream is written there again, nothing is kept aside."""
        code, out, err = changed(tmp_path, 'rm "$AOS_STREAM"; exit 4')
        assert Exit.RESTORED == code
        assert "it was deleted" in err
        assert 4 == one(events(out), "process.exit").attrs["exit_code"]
        verify_stream(out)
        assert not foreign(out).exists()

    def test_folder(self, tmp_path: Path) -> None:
        """A folder left at the path is moved aside whole, with what it holds."""
        code, out, err = changed(tmp_path, 'rm "$AOS_STREAM"; mkdir "$AOS_STREAM"; echo x > "$AOS_STREAM/inside"')
        assert Exit.RESTORED == code
        assert "a folder is there" in err
        verify_stream(out)
        assert b"x\n" == (foreign(out) / "inside").read_bytes()

    def test_symbolic_link_is_never_followed(self, tmp_path: Path) -> None:
        """A symbolic link at the path is moved aside; the file it points to is left untouched."""
        target = tmp_path / "precious"
        target.write_bytes(b"keep me")
        code, out, err = changed(tmp_path, f'rm "$AOS_STREAM"; ln -s {target} "$AOS_STREAM"')
        assert Exit.RESTORED == code
        assert "a symbolic link is there" in err
        assert b"keep me" == target.read_bytes()
        assert stat.S_ISREG(os.lstat(out).st_mode)
        assert str(target) == os.readlink(foreign(out))
        verify_stream(out)

    def test_fifo_is_never_opened(self, tmp_path: Path) -> None:
        """A FIFO at the path is moved aside without being opened (the recording does not hang on it)."""
        code, out, err = changed(tmp_path, 'rm "$AOS_STREAM"; mkfifo "$AOS_STREAM"')
        assert Exit.RESTORED == code
        assert "a FIFO is there" in err
        assert stat.S_ISFIFO(os.lstat(foreign(out)).st_mode)
        verify_stream(out)

    def test_a_taken_foreign_name_is_skipped(self, tmp_path: Path) -> None:
        """The command cannot make the recorder overwrite a file of its choosing: a taken name is skipped."""
        script = 'echo mine > "$AOS_STREAM.foreign-1"; rm "$AOS_STREAM"; echo f > "$AOS_STREAM"'
        code, out, _ = changed(tmp_path, script)
        assert Exit.RESTORED == code
        assert b"mine\n" == foreign(out).read_bytes()
        assert b"f\n" == out.with_name(out.name + ".foreign-2").read_bytes()
        verify_stream(out)

    def test_untouched_path_is_left_alone(self, tmp_path: Path) -> None:
        """A recording that leaves the path alone exits with the command's code and keeps nothing aside."""
        code, out, err = changed(tmp_path, "exit 3")
        assert (3, "") == (code, err)
        assert [out] == [p for p in tmp_path.iterdir() if p.name.startswith(out.name)]

    def test_cannot_put_it_back(self, tmp_path: Path) -> None:
        """The folder replaced by a file: the stream cannot be written again there, which is a recorder failure."""
        folder = tmp_path / "d"
        folder.mkdir()
        p = alpha(
            "observe",
            "record",
            "--quiet",
            "--out",
            str(folder / "s.aos"),
            "--",
            "sh",
            "-c",
            f"mv {folder} {folder}.moved; echo file > {folder}",
            cwd=tmp_path,
        )
        assert Exit.RECORDER == p.returncode
        assert b"cannot write the stream again beside" in p.stderr
        verify_stream(Path(f"{folder}.moved") / "s.aos")  # the recorder's file, where the command moved it
