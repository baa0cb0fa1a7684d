"""The gate language: parsing, refusals of malformed files, the built-ins, and the runnable examples."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gates.language import ArtifactRule, GateFileError, ReceiptRule, StepRule, load_gate, parse_gate_text
from gates.registry import UnknownGate, builtin_gates, resolve_gate
from tests.helpers.paths import ROOT
from tests.helpers.run import child_env

SAMPLES = sorted((ROOT / "samples" / "gates").glob("*.toml"))


class TestParsing:
    def test_minimal_gate(self) -> None:
        """A gate needs only a name; its scope defaults to command and it has no rules."""
        g = parse_gate_text('[gate]\nname = "g"\n', "t.toml")
        assert ("g", "command", []) == (g.name, g.scope, g.rules)

    def test_rule_defaults_and_ids(self) -> None:
        """Rules get their default check names and counts."""
        g = parse_gate_text(
            '[gate]\nname = "g"\n[[step]]\nname = "s"\n'
            '[[receipt]]\nname = "r"\ncount = 2\n[[artifact]]\nglob = "*.txt"\n',
            "t.toml",
        )
        step, receipt, artifact = g.rules
        assert isinstance(step, StepRule)
        assert isinstance(receipt, ReceiptRule)
        assert isinstance(artifact, ArtifactRule)
        assert ["step:s", "receipt:r", "artifact:*.txt"] == [r.id for r in g.rules]
        assert (0, 1, None) == (step.exit, step.count.min, step.count.max)
        assert (2, 2, ("pass",)) == (receipt.count.min, receipt.count.max, receipt.status)

    def test_artifact_attrs(self) -> None:
        """An artifact rule may select by its event's attrs; its glob then defaults to every path."""
        g = parse_gate_text('[gate]\nname = "g"\n[[artifact]]\nid = "cfg"\nattrs = { origin = "recorder" }\n', "t.toml")
        rule = g.rules[0]
        assert isinstance(rule, ArtifactRule)
        assert ("**", {"origin": "recorder"}) == (rule.glob, dict(rule.attrs))
        assert "artifacts with origin 'recorder'" in rule.describe()

    def test_parts_and_conditions(self) -> None:
        """A part keeps its condition, scope and rules."""
        g = parse_gate_text(
            '[gate]\nname = "g"\nscope = "a"\n[[part]]\nname = "p"\nwhen = { env = "X" }\nscope = "b"\n'
            '[[part.step]]\nname = "s"\n',
            "t.toml",
        )
        part = g.parts[1]
        assert ("p", "X", "b", ["step:s"]) == (
            part.name,
            part.when and part.when.env,
            part.scope,
            [r.id for r in part.rules],
        )

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("[gate]\n", "missing required key 'name'"),
            ('[gate]\nname = "g"\ncolour = 1\n', "unknown key(s) 'colour'"),
            ('[gate]\nname = "g"\n[[step]]\nname = "s"\nexit = "sometimes"\n', "'exit' must be"),
            ('[gate]\nname = "g"\n[[step]]\nname = 3\n', "'name' must be str"),
            ('[gate]\nname = "g"\n[[receipt]]\nname = "r"\nstatus = "great"\n', "unknown status 'great'"),
            ('[gate]\nname = "g"\n[[receipt]]\nname = "r"\nschema = { type = "nope" }\n', "not a valid JSON Schema"),
            ('[gate]\nname = "g"\n[[receipt]]\nname = "r"\nstep_exit = "c"\n', "need 'step'"),
            ('[gate]\nname = "g"\n[[check]]\nname = "c"\nuses = "no-such-check"\n', "no Python check named"),
            ('[gate]\nname = "g"\n[[order]]\nsequence = ["step:a"]\n', "at least two"),
            ('[gate]\nname = "g"\n[[step]]\nname = "s"\n[[step]]\nname = "s"\n', "share the check name"),
            ('[gate]\nname = "g"\n[[step]]\nname = "s"\nwhen = { envv = "X" }\n', "unknown key(s) 'envv'"),
            ('[gate]\nname = "g"\n[exit]\ncode = 0\notherwise = "pass"\n', "'otherwise' must be"),
            ('[gate]\nname = "g"\n[[step]]\nname = "s"\ncount = 1\nmin = 1\n', "either 'count'"),
            ('[gate]\nname = "g"\n[[artifact]]\ncount = 1\n', "missing required key 'glob'"),
            ('[gate]\nname = "g"\n[[artifact]]\nattrs = { origin = [1] }\n', "'attrs' values must be"),
            ("[gate\n", "not valid TOML"),
        ],
    )
    def test_malformed_gate_refused(self, text: str, message: str) -> None:
        """A malformed gate file is refused as gate-file, naming what is wrong."""
        with pytest.raises(GateFileError) as info:
            parse_gate_text(text, "t.toml")
        assert "gate-file" == info.value.name
        assert message in info.value.detail

    def test_unreadable_file_refused(self, tmp_path: Path) -> None:
        """A gate file that cannot be read is refused as gate-file."""
        with pytest.raises(GateFileError):
            load_gate(tmp_path / "missing.toml")


class TestRegistry:
    def test_builtin_gates(self) -> None:
        """The five built-in gates are shipped as TOML and load."""
        expected = ["coordinate-device", "distributed-device", "exit-zero", "independent-device", "tests-pass"]
        assert expected == sorted(builtin_gates())

    def test_device_gates_condition_on_their_config(self) -> None:
        """Each device gate's physical part applies only when its own config variable was set."""
        want = {
            "distributed-device": "ALPHA_PARTITIONED_DEVICE_CONFIG",
            "coordinate-device": "ALPHA_COORDINATE_DEVICE_CONFIG",
            "independent-device": "ALPHA_INDEPENDENT_DEVICE_CONFIG",
        }
        got = {n: g.parts[1].when.env for n, g in builtin_gates().items() if len(g.parts) > 1 and g.parts[1].when}
        assert want == got

    def test_unknown_gate(self) -> None:
        """An unknown gate name is refused, naming the known ones."""
        with pytest.raises(UnknownGate) as info:
            resolve_gate("nope")
        assert "exit-zero" in info.value.detail

    def test_gate_file_may_not_shadow_builtin(self, tmp_path: Path) -> None:
        """A gate file may not reuse a built-in gate's name."""
        f = tmp_path / "g.toml"
        f.write_text('[gate]\nname = "distributed-device"\nscope = "physical"\n')
        with pytest.raises(GateFileError) as info:
            resolve_gate("distributed-device", [f])
        assert "shadow" in info.value.detail

    def test_gate_file_may_not_claim_physical_scope(self, tmp_path: Path) -> None:
        """A gate file may not give scope physical, which only the built-in device gates establish."""
        f = tmp_path / "g.toml"
        f.write_text('[gate]\nname = "mine"\n[[part]]\nname = "p"\nwhen = { env = "X" }\nscope = "physical"\n')
        with pytest.raises(GateFileError) as info:
            resolve_gate("mine", [f])
        assert "reserved" in info.value.detail

    def test_gate_file_by_its_name(self, tmp_path: Path) -> None:
        """A gate file's gate is found by its [gate] name and carries its source and digest."""
        f = tmp_path / "g.toml"
        f.write_text('[gate]\nname = "mine"\n')
        g = resolve_gate("mine", [f])
        assert ("mine", str(f), 64) == (g.name, g.source, len(g.digest))


class TestDocumentedExamples:
    def test_docs_show_each_sample_verbatim(self) -> None:
        """docs/GATES.md shows each sample gate file exactly as it is in samples/gates/."""
        doc = (ROOT / "docs" / "GATES.md").read_text()
        shown = dict(re.findall(r"<!-- (samples/gates/[\w.-]+) -->\n```toml\n(.*?)```", doc, re.S))
        assert {str(p.relative_to(ROOT)): p.read_text() for p in SAMPLES} == shown

    def test_every_registered_check_is_documented(self) -> None:
        """Each named Python check the built-in gates can use has its row in docs/GATES.md."""
        from gates.checks import CHECKS

        doc = (ROOT / "docs" / "GATES.md").read_text()
        rows = set(re.findall(r"^\| `([\w-]+)` \|", doc, re.M))
        assert set(CHECKS) <= rows

    def test_python_examples_run(self) -> None:
        """Every Python example in docs/GATES.md runs as written."""
        doc = (ROOT / "docs" / "GATES.md").read_text()
        blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
        assert blocks
        for block in blocks:
            exec(compile(block, "docs/GATES.md", "exec"), {})

    @pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
    def test_sample_runs_as_documented(self, sample: Path, tmp_path: Path) -> None:
        """Each sample gate, run on its example command, gives the verdict and scope its header expects."""
        text = sample.read_text()
        name = parse_gate_text(text, str(sample)).name
        command = re.search(r"^# example: (.*)$", text, re.M)
        expects = re.findall(r"^# expect((?: \w+=\S+)*): (\w+) (\S+)$", text, re.M)
        assert command is not None
        assert expects
        shutil.copytree(ROOT / "samples" / "gates", tmp_path / "samples" / "gates")
        got, want = [], []
        for i, (env_text, verdict, scope) in enumerate(expects):
            env = {k: v for k, v in child_env().items() if not k.startswith("NIGHTLY_")}
            env.update(dict(kv.split("=", 1) for kv in env_text.split()))
            out = tmp_path / f"run{i}.aos"
            argv = [
                "alpha",
                "observe",
                "gate",
                name,
                "--gate-file",
                str(sample),
                "--quiet",
                "--json",
                "--out",
                str(out),
            ]
            proc = subprocess.run([*argv, "--", *command.group(1).split()], cwd=tmp_path, env=env, capture_output=True)
            v = json.loads(proc.stdout)
            got.append((proc.returncode, v["verdict"], v["scope"]))
            want.append(({"pass": 0, "fail": 1, "inconclusive": 3}[verdict], verdict, scope))
        assert want == got
