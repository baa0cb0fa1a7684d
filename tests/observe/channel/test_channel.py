"""The AOS_RECEIPTS channel: receipt lines, steps, and the light client path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from observe.channel.protocol import FrameReader, ReceiptTail, encode_frame, parse_receipt_line, receipt_line
from tests.helpers.recorder import events, index, kinds, one, output, record
from tests.helpers.run import alpha, child_env


class TestParseReceiptLine:
    def test_full_receipt(self) -> None:
        """A complete line becomes exactly {name, status, fields}."""
        line = b'{"name":"build","status":"pass","fields":{"n":1}}'
        assert ("receipt", {"name": "build", "status": "pass", "fields": {"n": 1}}) == parse_receipt_line(line)

    def test_defaults(self) -> None:
        """status defaults to info and fields to an empty object."""
        assert ("receipt", {"name": "x", "status": "info", "fields": {}}) == parse_receipt_line(b'{"name":"x"}')

    @pytest.mark.parametrize(
        ("line", "reason"),
        [
            (b"not json", "not JSON"),
            (b"[1,2]", "not a JSON object"),
            (b'{"status":"pass"}', "name missing"),
            (b'{"name":""}', "name missing"),
            (b'{"name":"x","status":"great"}', "status 'great'"),
            (b'{"name":"x","fields":[1]}', "fields is not a JSON object"),
            (b'{"name":"x","extra":1}', "unknown key 'extra'"),
            (b'{"name":"\xff"}', "not UTF-8"),
            (b'{"name":"x","fields":{"v":NaN}}', "not JSON"),
            (b"  ", "empty line"),
        ],
    )
    def test_invalid_lines(self, line: bytes, reason: str) -> None:
        """Each malformed line is receipt.invalid with a reason naming what is wrong."""
        kind, attrs = parse_receipt_line(line)
        assert "receipt.invalid" == kind
        assert reason in attrs["reason"]

    def test_receipt_line_round_trips(self) -> None:
        """receipt_line writes one newline-terminated line that parses back to itself."""
        line = receipt_line("n", "fail", {"k": [1, "é"]})
        assert line.endswith(b"\n")
        assert 1 == line.count(b"\n")
        assert ("receipt", {"name": "n", "status": "fail", "fields": {"k": [1, "é"]}}) == parse_receipt_line(line[:-1])


class TestReceiptTail:
    def test_partial_last_line_waits_for_its_newline(self, tmp_path: Path) -> None:
        """A line appended in two writes is yielded once, whole, after its newline arrives."""
        path = tmp_path / "r"
        path.write_bytes(b"")
        tail = ReceiptTail(str(path), None)
        with path.open("ab") as f:
            f.write(b'{"name":"a"}\n{"na')
        assert [b'{"name":"a"}'] == list(tail.lines())
        with path.open("ab") as f:
            f.write(b'me":"b"}\n')
        assert [b'{"name":"b"}'] == list(tail.lines())
        with path.open("ab") as f:
            f.write(b'{"name":"c"}')
        assert [] == list(tail.lines())
        assert b'{"name":"c"}' == tail.rest()
        tail.close()


class TestFrames:
    def test_frames_split_anywhere(self) -> None:
        """Frames cut at every byte boundary come out whole and in order."""
        wire = encode_frame(b"J", b'{"op":"x"}') + encode_frame(b"o", b"\x00" * 300) + encode_frame(b"e", b"")
        for cut in range(len(wire)):
            reader = FrameReader()
            got = list(reader.feed(wire[:cut])) + list(reader.feed(wire[cut:]))
            assert [(b"J", b'{"op":"x"}'), (b"o", b"\x00" * 300), (b"e", b"")] == got


class TestReceipts:
    def test_shell_cli_and_invalid_lines(self, tmp_path: Path) -> None:
        """echo, the receipt command and bad lines all land in the stream; nothing is dropped."""
        script = (
            'echo \'{"name":"shell","status":"pass","fields":{"a":1}}\' >> "$AOS_RECEIPTS";'
            "alpha observe receipt cli --status fail --field n=3 --field s=text --field j='[1]'"
            ' --json \'{"n":0,"o":true}\';'
            'printf "garbage\\377\\n\\n" >> "$AOS_RECEIPTS";'
            'printf \'{"name":"last-no-newline"}\' >> "$AOS_RECEIPTS"'
        )
        proc, path = record(tmp_path, ["sh", "-c", script])
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        receipts = [e.attrs for e in evs if e.kind == "receipt"]
        assert {"name": "shell", "status": "pass", "fields": {"a": 1}} == receipts[0]
        assert {"name": "cli", "status": "fail", "fields": {"n": 3, "s": "text", "j": [1], "o": True}} == receipts[1]
        assert "last-no-newline" == receipts[2]["name"]
        invalid = [e for e in evs if e.kind == "receipt.invalid"]
        assert [b"garbage\xff", b""] == [e.data for e in invalid]
        assert "empty line" == invalid[1].attrs["reason"]
        assert all(e.step is None for e in evs if e.kind.startswith("receipt"))

    def test_thousand_concurrent_writers_lose_nothing(self, tmp_path: Path) -> None:
        """1,000 concurrent shell writers (and a few CLI ones) each get exactly one receipt."""
        script = (
            'for i in $(seq 1000); do echo "{\\"name\\":\\"r$i\\",\\"fields\\":{\\"pad\\":\\"'
            + "x" * 200
            + '\\"}}" >> "$AOS_RECEIPTS" & done;'
            "for i in 1 2 3 4 5 6 7 8; do alpha observe receipt cli$i & done; wait"
        )
        proc, path = record(tmp_path, ["sh", "-c", script], timeout=120)
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        names = sorted(e.attrs["name"] for e in evs if e.kind == "receipt")
        assert sorted([f"r{i}" for i in range(1, 1001)] + [f"cli{i}" for i in range(1, 9)]) == names
        assert "receipt.invalid" not in kinds(evs)
        exit_at = index(evs, "process.exit")
        assert all(i < exit_at for i, e in enumerate(evs) if e.kind == "receipt")


class TestSteps:
    def test_step_spans_attribute_output_and_nest(self, tmp_path: Path) -> None:
        """Step output, receipts and nested steps carry the innermost span id; exit codes are kept."""
        script = (
            "echo top;"
            "alpha observe step build -- sh -c '"
            'echo building; echo warn >&2; echo \\{\\"name\\":\\"inner\\"\\} >> "$AOS_RECEIPTS";'
            'alpha observe step nested -- sh -c "echo deep; echo deep-err >&2; exit 4"; echo nested=$?; exit 5\';'
            "echo step=$?"
        )
        proc, path = record(tmp_path, ["sh", "-c", script])
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        starts = [e for e in evs if e.kind == "step.start"]
        ends = [e for e in evs if e.kind == "step.end"]
        build, nested = starts
        assert ("build", None) == (build.attrs["name"], build.attrs["parent"])
        assert ("nested", build.step) == (nested.attrs["name"], nested.attrs["parent"])
        assert build.step
        assert nested.step
        assert build.step != nested.step
        assert b"building\nnested=4\n" == output(evs, "stdout", build.step)
        assert b"warn\n" == output(evs, "stderr", build.step)
        assert b"deep\n" == output(evs, "stdout", nested.step)
        assert b"deep-err\n" == output(evs, "stderr", nested.step)
        assert b"top\nstep=5\n" == output(evs, "stdout", None)
        assert build.step == one(evs, "receipt").step
        by_span = {e.step: e.attrs for e in ends}
        assert (5, None) == (by_span[build.step]["exit_code"], by_span[build.step]["signal"])
        assert 4 == by_span[nested.step]["exit_code"]
        assert by_span[nested.step]["duration_ns"] > 0
        assert [nested.step, build.step] == [e.step for e in ends]
        assert b"top\nbuilding\ndeep\nnested=4\nstep=5\n" == proc.stdout

    def test_step_output_piped_elsewhere_still_reaches_its_reader(self, tmp_path: Path) -> None:
        """When a step's stdout is piped to another program, that program still gets the bytes."""
        script = "alpha observe step s -- printf 'a\\nb\\n' | tr a-z A-Z"
        proc, path = record(tmp_path, ["sh", "-c", script])
        evs = events(path)
        span = one(evs, "step.start").step
        assert b"a\nb\n" == output(evs, "stdout", span)
        assert b"A\nB\n" == output(evs, "stdout", None)
        assert b"A\nB\n" == proc.stdout

    def test_step_exit_codes(self, tmp_path: Path) -> None:
        """A step exits with its sub-command's code: 127 not found, 128+N for a signal."""
        script = (
            "alpha observe step a -- no-such-cmd-xyz; echo a=$?; alpha observe step b -- sh -c 'kill -9 $$'; echo b=$?"
        )
        _proc, path = record(tmp_path, ["sh", "-c", script])
        evs = events(path)
        assert b"a=127\nb=137\n" == output(evs, "stdout", None)
        ends = [e.attrs for e in evs if e.kind == "step.end"]
        assert 127 == ends[0]["exit_code"]
        assert (None, "SIGKILL") == (ends[1]["exit_code"], ends[1]["signal"])


class TestOutsideARecording:
    @pytest.mark.parametrize(
        "args",
        [["receipt", "x"], ["step", "s", "--", "true"], ["artifact", "somefile"]],
    )
    def test_says_so_and_fails(self, args: list[str]) -> None:
        """receipt, step and artifact outside a recording exit 2 with a clear message."""
        proc = alpha("observe", *args)
        assert 2 == proc.returncode
        assert b"not inside a recording" in proc.stderr

    def test_step_standalone_runs_anyway(self) -> None:
        """step --standalone runs its command outside a recording and keeps its exit code."""
        proc = alpha("observe", "step", "s", "--standalone", "--", "sh", "-c", "echo ran; exit 6")
        assert (6, b"ran\n") == (proc.returncode, proc.stdout)


class TestLightPath:
    @pytest.mark.parametrize("args", [["receipt", "x", "--field", "a=1"], ["step", "s", "--", "true"]])
    def test_no_pyarrow_import(self, tmp_path: Path, args: list[str]) -> None:
        """receipt and step never import pyarrow (python -X importtime shows every import)."""
        receipts = tmp_path / "receipts"
        receipts.write_bytes(b"")
        code = f"import sys; sys.argv = ['alpha', 'observe', *{args!r}]; from observe.cli.root import main; main()"
        env = child_env({"AOS_RECEIPTS": str(receipts), "AOS_CONTROL": str(tmp_path / "none")})
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code], capture_output=True, env=env, check=False
        )
        imported = [line.split("|")[-1].strip() for line in proc.stderr.decode().splitlines() if "import time" in line]
        assert "click" in imported
        assert not [m for m in imported if m.split(".")[0] in {"pyarrow", "numpy", "pandas"}]
        if args[0] == "receipt":
            # No recorder answers on AOS_CONTROL: the line is written, but nothing confirms it was recorded.
            assert 1 == proc.returncode, proc.stderr
            assert b"did not confirm" in proc.stderr
            assert {"name": "x", "status": "info", "fields": {"a": 1}} == json.loads(receipts.read_bytes())

    def test_receipt_cli_rejects_bad_json(self, tmp_path: Path) -> None:
        """--json that is not a JSON object is a usage error (2), and nothing is written."""
        receipts = tmp_path / "receipts"
        receipts.write_bytes(b"")
        proc = alpha("observe", "receipt", "x", "--json", "[1]", env={"AOS_RECEIPTS": str(receipts)})
        assert 2 == proc.returncode
        assert b"" == receipts.read_bytes()
