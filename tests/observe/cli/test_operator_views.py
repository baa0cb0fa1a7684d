"""What an operator reads first (DESIGN "Operating a lane", issue 31): the cause of a verdict that did not pass
before its check list, expected refusal controls labelled, a status line on a terminal only, ``simulated``
wherever simulated GPUs are named, counts as sentences, no binary bytes in ``show --check``."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers.run import alpha

GPU = "GPU-5e5e5e5e-0000-0000-0000-000000000001"

LANE_GATE = """\
[gate]
name = "little-lane"
scope = "lane"

[exit]
code = 0

[[step]]
name = "preflight"

[[step]]
name = "work"

[[receipt]]
name = "work"
count = 1
step = "work"
"""

# preflight refuses (exit 27); the lane stops: no later step, no receipt, and the command exits 1.
LANE = """\
alpha observe step early -- true
alpha observe step preflight -- sh -c 'echo "refused: host-key-unknown: node-a" >&2; exit 27' || exit 1
alpha observe step work -- alpha observe receipt work --status pass
"""


def _gate(tmp_path: Path, script: str, *more: str) -> tuple[int, str]:
    (tmp_path / "lane.toml").write_text(LANE_GATE)
    (tmp_path / "lane.sh").write_text(script)
    done = alpha(
        "observe",
        "gate",
        "little-lane",
        "--gate-file",
        "lane.toml",
        "--out",
        "s.aos",
        *more,
        "--",
        "bash",
        "lane.sh",
        cwd=tmp_path,
        text=True,
    )
    return done.returncode, done.stderr


class TestCauseFirst:
    def test_the_first_failing_check_in_run_order_is_printed_before_the_check_list(self, tmp_path: Path) -> None:
        """The lane's preflight fails: it is named first, with the count of the checks it brought down, before
        the list (where the gate's own order puts exit-code first)."""
        rc, err = _gate(tmp_path, LANE)
        assert 1 == rc, err
        lines = err.splitlines()
        head = next(i for i, line in enumerate(lines) if line.startswith("gate little-lane: FAIL"))
        first = lines[head + 2]
        assert first.startswith("first: step:preflight: FAIL: "), err
        assert first.endswith("exited 27; expected exit 0 (refused: host-key-unknown)"), first
        # exit-code (cites process.exit, later), step:work and receipt:work (nothing ran) depend on it
        assert "  3 later checks that did not pass depend on it" == lines[head + 3], err
        assert lines[head + 4].lstrip().startswith(("FAIL", "INCONCLUSIVE", "pass")), err

    def test_the_same_line_when_read_back(self, tmp_path: Path) -> None:
        """``verdict`` on the sealed stream prints the same cause."""
        _gate(tmp_path, LANE)
        done = alpha("observe", "verdict", "s.aos", cwd=tmp_path, text=True)
        assert 1 == done.returncode
        assert "\nfirst: step:preflight: FAIL: " in done.stdout
        assert "3 later checks that did not pass depend on it" in done.stdout

    def test_a_pass_prints_no_cause(self, tmp_path: Path) -> None:
        rc, err = _gate(tmp_path, LANE.replace("exit 27", "exit 0"))
        assert 0 == rc, err
        assert "first:" not in err

    def test_one_dependent_reads_as_a_sentence(self, tmp_path: Path) -> None:
        """The work step fails without its receipt: the step is the cause, and one check depends on it."""
        script = LANE.replace("exit 27", "exit 0").replace("alpha observe receipt work --status pass", "sh -c 'exit 5'")
        rc, err = _gate(tmp_path, script + "true\n")
        assert 1 == rc, err
        assert "first: step:work: FAIL: step 'work' exited 5; expected exit 0" in err
        assert "\n  1 later check that did not pass depends on it\n" in err


class TestSimulatedSaid:
    """Every CLI view that names a simulated observer's GPUs says they are simulated."""

    @staticmethod
    def _stream(tmp_path: Path) -> Path:
        from tracker.testing import sealed_stream

        sealed_stream(tmp_path / "s.aos", gate="distributed-device", devices=[GPU])
        return tmp_path / "s.aos"

    def test_show(self, tmp_path: Path) -> None:
        self._stream(tmp_path)
        out = alpha("observe", "show", "s.aos", cwd=tmp_path, text=True).stdout
        line = next(x for x in out.splitlines() if x.startswith("devices"))
        assert line.startswith("devices    observer simulated, "), out  # the observer's own name says it

    def test_verdict(self, tmp_path: Path) -> None:
        self._stream(tmp_path)
        out = alpha("observe", "verdict", "s.aos", cwd=tmp_path, text=True).stdout
        assert f"\nobserved on {GPU} (simulated: a test double, not hardware)\n" in out, out

    def test_gate(self, tmp_path: Path) -> None:
        """A recording under the simulated observer (the test double's config) says it in the gate's table."""
        import json

        config = {"driver": "0.0", "gpus": [{"index": 0, "minor": 0, "uuid": GPU, "name": "Double", "memory": 1 << 30}]}
        (tmp_path / "sim.json").write_text(json.dumps(config))
        done = alpha(
            "observe",
            "gate",
            "exit-zero",
            "--out",
            "g.aos",
            "--",
            "true",
            cwd=tmp_path,
            text=True,
            env={"ALPHA_OBSERVE_SIMULATED_GPUS": str(tmp_path / "sim.json")},
        )
        assert 0 == done.returncode, done.stderr
        assert f"\nobserved on {GPU} (simulated: a test double, not hardware)\n" in done.stderr, done.stderr


PROGRESS_LANE = 'for i in 1 2 3; do alpha observe step "s$i" -- sh -c "echo hi $i; sleep 0.7"; done'
STATUS = re.compile(rb"\r\x1b\[K(alpha: [^\r\n]*)?")


def _on_a_terminal(args: list[str], cwd: Path) -> tuple[int, bytes]:
    """Run ``alpha ARGS`` with stdin, stdout and stderr on one pseudo-terminal; its exit code and every byte."""
    import os
    import pty
    import subprocess

    from tests.helpers.run import ALPHA, child_env

    master, slave = pty.openpty()
    try:
        p = subprocess.Popen(
            [ALPHA, *args],
            cwd=cwd,
            env=child_env({"TERM": "xterm"}),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            close_fds=True,
        )
        os.close(slave)
        out = bytearray()
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's last writer closed it
                break
            if not chunk:
                break
            out += chunk
        return p.wait(timeout=60), bytes(out)
    finally:
        os.close(master)


class TestProgress:
    def test_a_status_line_on_a_terminal_cleared_before_each_echo(self, tmp_path: Path) -> None:
        """On a terminal the status line names the running step, the time, the steps done and the bytes
        recorded; taken out, what is left is exactly the command's output (the terminal's CR LF aside)."""
        rc, out = _on_a_terminal(["observe", "record", "--out", "s.aos", "--", "bash", "-c", PROGRESS_LANE], tmp_path)
        assert 0 == rc, out
        shown = [m.group(1) for m in STATUS.finditer(out) if m.group(1)]
        assert any(re.fullmatch(rb"alpha: step s2 running, 0:0\d, 1 step done, 10 B recorded", s) for s in shown), out
        assert any(b"2 steps done, 15 B recorded" in s for s in shown), out
        assert b"hi 1\nhi 2\nhi 3\n" == STATUS.sub(b"", out).replace(b"\r\n", b"\n"), out
        assert out.endswith(b"\r\x1b[K"), out  # the line is taken off at the end

    def test_redrawn_at_most_four_times_a_second(self, tmp_path: Path) -> None:
        rc, out = _on_a_terminal(["observe", "record", "--out", "s.aos", "--", "sleep", "2"], tmp_path)
        assert 0 == rc, out
        draws = [m for m in STATUS.finditer(out) if m.group(1)]
        assert 1 <= len(draws) <= 4 * 2 + 1, out  # and only when the line changed: about once a second here
        assert b"alpha: the command running, 0:01, 0 steps done, 0 B recorded" in out

    def test_off_a_terminal_the_output_is_the_commands_bytes(self, tmp_path: Path) -> None:
        """Pipes get exactly what the command wrote, and nothing else."""
        done = alpha(
            "observe", "record", "--out", "s.aos", "--", "bash", "-c", PROGRESS_LANE + "; echo err >&2", cwd=tmp_path
        )
        assert (0, b"hi 1\nhi 2\nhi 3\n", b"err\n") == (done.returncode, done.stdout, done.stderr)

    def test_the_gate_on_a_terminal(self, tmp_path: Path) -> None:
        """``gate`` shows it too, and prints its table after the line is gone."""
        rc, out = _on_a_terminal(
            ["observe", "gate", "exit-zero", "--out", "s.aos", "--", "bash", "-c", PROGRESS_LANE], tmp_path
        )
        assert 0 == rc, out
        assert b"alpha: step s1 running" in out
        text = STATUS.sub(b"", out).replace(b"\r\n", b"\n")
        assert text.startswith(b"hi 1\nhi 2\nhi 3\n"), out
        assert b"gate exit-zero: " in text


CONTROL_GATE = """\
[gate]
name = "controls"
scope = "lane"

[[step]]
name = "work"

[[step]]
name = "refusal-bad-input"
exit = "nonzero"
stderr_contains = "refused: bad-input"
"""

CONTROL_LANE = """\
alpha observe step work -- sh -c 'echo working >&2'
alpha observe step refusal-bad-input -- sh -c 'printf "refused: bad-input: as it should" >&2; exit 20' || true
"""


class TestExpectedRefusalControls:
    def test_the_echo_labels_a_step_the_gate_expects_to_refuse(self, tmp_path: Path) -> None:
        """The control's ``refused:`` line is framed as expected (its own line, even after an unended one);
        a step that must succeed is not; the stream holds the command's bytes only."""
        (tmp_path / "g.toml").write_text(CONTROL_GATE)
        (tmp_path / "lane.sh").write_text(CONTROL_LANE)
        done = alpha(
            "observe",
            "gate",
            "controls",
            "--gate-file",
            "g.toml",
            "--out",
            "s.aos",
            "--",
            "bash",
            "lane.sh",
            cwd=tmp_path,
            text=True,
        )
        assert 0 == done.returncode, done.stderr
        head = done.stderr[: done.stderr.index("gate controls:")]
        assert (
            "working\n"
            "[alpha] expected refusal control: step refusal-bad-input must refuse; its 'refused:' line is expected\n"
            "refused: bad-input: as it should\n"
            "[alpha] end of expected refusal control refusal-bad-input (exit 20; the gate judges the refusal)\n"
        ) == head
        read = alpha("observe", "read", "s.aos", "--stderr", cwd=tmp_path, text=True)
        assert "working\nrefused: bad-input: as it should" == read.stdout

    def test_record_without_a_gate_labels_nothing(self, tmp_path: Path) -> None:
        (tmp_path / "lane.sh").write_text(CONTROL_LANE)
        done = alpha("observe", "record", "--out", "s.aos", "--", "bash", "lane.sh", cwd=tmp_path, text=True)
        assert "working\nrefused: bad-input: as it should" == done.stderr


ARTIFACT_GATE = """\
[gate]
name = "kept"
scope = "files"

[[artifact]]
glob = "b.bin"
"""


class TestFirstReading:
    def test_show_check_never_prints_a_captured_files_bytes(self, tmp_path: Path) -> None:
        """A check citing a captured binary file shows its size and digest, not its bytes (escaped or not)."""
        (tmp_path / "g.toml").write_text(ARTIFACT_GATE)
        script = "printf '\\000\\001\\002ELF-ish\\377' > b.bin; alpha observe artifact b.bin"
        done = alpha(
            "observe",
            "gate",
            "kept",
            "--gate-file",
            "g.toml",
            "--out",
            "s.aos",
            "--",
            "sh",
            "-c",
            script,
            cwd=tmp_path,
            text=True,
        )
        assert 0 == done.returncode, done.stderr
        shown = alpha("observe", "show", "s.aos", "--check", "artifact:b.bin", cwd=tmp_path).stdout
        for dumped in (b"ELF-ish", b"\\x00", b"\x00"):
            assert dumped not in shown, shown
        assert b"reason     1 artifact matching 'b.bin': b.bin\n" in shown, shown
        assert re.search(rb"data 11 B of a captured file, not shown \(sha256 [0-9a-f]{16}\.\.\.;", shown), shown

    def test_counts_read_as_sentences_in_show(self, tmp_path: Path) -> None:
        done = alpha(
            "observe", "gate", "exit-zero", "--out", "s.aos", "--", "sh", "-c", "printf '\\000\\001\\002'", cwd=tmp_path
        )
        assert 0 == done.returncode
        # exit-code cites process.exit only; the stdout event is shown through a check citing it: read --seq
        shown = alpha("observe", "show", "s.aos", cwd=tmp_path, text=True).stdout
        assert "stdout 3 B in 1 chunk, stderr 0 B in 0 chunks" in shown, shown
        assert "(gate exit-zero, scope command, 1 check)" in shown, shown


COUNT_GATE = """\
[gate]
name = "counted"
scope = "lane"

[[receipt]]
name = "one"
count = 1

[[receipt]]
name = "two"
min = 1
"""


class TestCountsAsSentences:
    def test_the_gates_table_says_1_receipt_and_2_receipts(self, tmp_path: Path) -> None:
        (tmp_path / "g.toml").write_text(COUNT_GATE)
        script = (
            "alpha observe receipt one --status pass; for i in 1 2; do alpha observe receipt two --status pass; done"
        )
        done = alpha(
            "observe",
            "gate",
            "counted",
            "--gate-file",
            "g.toml",
            "--out",
            "s.aos",
            "--",
            "sh",
            "-c",
            script,
            cwd=tmp_path,
            text=True,
        )
        assert 0 == done.returncode, done.stderr
        assert "1 receipt 'one' recorded, status pass" in done.stderr, done.stderr
        assert "2 receipts 'two' recorded, status pass" in done.stderr, done.stderr
        assert "(s)" not in done.stderr


class TestCauseFirstInTheSummary:
    def test_the_markdown_summary_names_the_cause_before_its_table(self, tmp_path: Path) -> None:
        """``--summary`` (GitHub's job summary, Buildkite's annotation) says the cause first too."""
        (tmp_path / "lane.toml").write_text(LANE_GATE)
        (tmp_path / "lane.sh").write_text(LANE)
        done = alpha(
            "observe",
            "gate",
            "little-lane",
            "--gate-file",
            "lane.toml",
            "--out",
            "s.aos",
            "--summary",
            "sum.md",
            "--",
            "bash",
            "lane.sh",
            cwd=tmp_path,
            text=True,
        )
        assert 1 == done.returncode, done.stderr
        text = (tmp_path / "sum.md").read_text()
        first = text.index("**First:** step\\:preflight: ❌ fail: step \\'preflight\\' exited 27")
        assert "3 later checks that did not pass depend on it." in text
        assert first < text.index("| check | status |")


class TestNodesShown:
    def test_show_names_each_nodes_observer_and_says_simulated(self, tmp_path: Path) -> None:
        """A node's observation (over SSH) is shown beside the recorder's own, simulated said."""
        from gates.testing import SyntheticStream

        s = SyntheticStream()
        s.add("device.observed", {"phase": "start", "observer": "none", "gpus": [], "processes": []})
        gpu = {"index": 0, "minor": 0, "uuid": GPU, "name": "Double", "memory": 1 << 30}
        node = {"host": "lane@pod-a", "port": 2222}
        s.add(
            "device.observed",
            {"phase": "start", "observer": "simulated", "driver": "0.0", "gpus": [gpu], "processes": [], "node": node},
        )
        s.exit(0)
        s.write(tmp_path / "s.aos")
        out = alpha("observe", "show", "s.aos", cwd=tmp_path, text=True).stdout
        assert "devices    observer none: 0 GPUs\n" in out, out
        assert "  node lane@pod-a:2222: observer simulated, driver 0.0: 1 GPU (Double)\n" in out, out
