"""What an operator reads first: the cause of a verdict that did not pass, before its check list."""

from __future__ import annotations

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
        assert "exited 27" in first
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
        assert "observer simulated (simulated: a test double, not hardware)" in line, out

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
