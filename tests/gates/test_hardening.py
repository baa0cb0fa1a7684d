"""Gate files under attack: remote $refs, pathological regexes, look-alike names and scopes,
random and deeply nested files, and a command that survives its interruption (issue 11)."""

from __future__ import annotations

import contextlib
import http.server
import random
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from gates.engine import schema_errors
from gates.evaluation import evaluate_stream
from gates.language import GateFileError, parse_gate_text
from gates.registry import load_user_gate, resolve_gate
from tests.helpers.recorder import record, recorded_stdout_so_far, wait_for
from tests.helpers.run import ALPHA, alpha


class _Hits(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Hits.hits.append(self.path)
        body = b'{"type": "string"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/schema+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    """A schema server on 127.0.0.1 that records every request it gets."""
    _Hits.hits = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hits)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _gate_file(tmp_path: Path, body: str, name: str = "g") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(f'[gate]\nname = "{name}"\n\n{body}')
    return path


class TestNeverFetched:
    def test_remote_ref_is_refused_at_load(self, tmp_path: Path, server: str) -> None:
        """A schema $ref to http(s) makes the gate file a usage error (exit 2); nothing is fetched."""
        f = _gate_file(tmp_path, f'[[receipt]]\nname = "r"\nschema = {{ "$ref" = "{server}/s.json" }}\n')
        proc = alpha("observe", "gate", "g", "--gate-file", str(f), "--out", str(tmp_path / "g.aos"), "--", "true")
        assert 2 == proc.returncode
        assert b"never fetched" in proc.stderr
        assert [] == _Hits.hits

    def test_evaluation_never_fetches(self, server: str) -> None:
        """Evaluating a schema that reaches a remote reference raises (an inconclusive check), never fetches."""
        with pytest.raises(Exception):  # noqa: B017, PT011 - any error: the point is that no request is made
            schema_errors({"properties": {"v": {"$ref": f"{server}/s.json"}}}, {"v": 1})
        assert [] == _Hits.hits


_EVIL = "^(a+)+$"


class TestRegexInLinearTime:
    def test_pathological_pattern_does_not_stall_sealing(self, tmp_path: Path) -> None:
        """``^(a+)+$`` against a long 'aaaa…!' field fails the check at once; the stream is sealed."""
        schema = f'{{ type = "object", properties = {{ v = {{ type = "string", pattern = "{_EVIL}" }} }} }}'
        f = _gate_file(tmp_path, f'[[receipt]]\nname = "r"\nstatus = "info"\nschema = {schema}\n')
        out = tmp_path / "re.aos"
        proc = alpha(
            "observe", "gate", "g", "--gate-file", str(f), "--out", str(out), "--quiet", "--",
            "alpha", "observe", "receipt", "r", "--field", "v=" + "a" * 64 + "!",
            timeout=120,
        )  # fmt: skip
        assert 1 == proc.returncode, proc.stderr
        assert 0 == alpha("observe", "verify", str(out)).returncode
        assert b"does not match" in alpha("observe", "verdict", str(out), "--json").stdout

    def test_pattern_properties_and_additional_properties_run_on_re2(self) -> None:
        """Keys are matched by the linear-time engine too, also where additionalProperties needs them."""
        schema = {"patternProperties": {_EVIL: {"type": "integer"}}, "additionalProperties": False}
        errors = schema_errors(schema, {"a" * 64 + "!": 1, "aaa": "x"})
        assert 2 == len(errors)

    @pytest.mark.parametrize("pattern", [r"(a)\\1", "(?=a)b", "(?<!x)y"])
    def test_pattern_re2_cannot_run_is_refused(self, pattern: str) -> None:
        """Backreferences and lookaround are refused when the gate file is read (GateFileError)."""
        text = f'[gate]\nname = "g"\n[[receipt]]\nname = "r"\nschema = {{ pattern = "{pattern}" }}\n'
        with pytest.raises(GateFileError, match="linear time"):
            parse_gate_text(text, "t.toml")


class TestLookAlikes:
    @pytest.mark.parametrize("name", ["Exit-Zero", " exit-zero", "exit-zero ", "EXIT_ZERO"])
    def test_builtin_names_match_exactly(self, name: str) -> None:
        """A gate name that only looks like a built-in does not resolve (with a hint)."""
        from gates.registry import UnknownGate

        with pytest.raises(UnknownGate, match="did you mean 'exit-zero'"):
            resolve_gate(name)

    @pytest.mark.parametrize("name", ["Exit-Zero", "exit_zero", "\uff25\uff38\uff29\uff34-\uff3a\uff25\uff32\uff2f"])
    def test_user_gate_may_not_look_like_a_builtin(self, tmp_path: Path, name: str) -> None:
        """A user gate named like a built-in in another case or spelling is refused."""
        f = tmp_path / "g.toml"
        f.write_text(f'[gate]\nname = "{name}"\n[exit]\ncode = 0\n', encoding="utf-8")
        with pytest.raises(GateFileError, match="would pass for the built-in"):
            load_user_gate(f)

    @pytest.mark.parametrize(
        "scope", ["physical ", "Physical", " PHYSICAL", "\uff50\uff48\uff59\uff53\uff49\uff43\uff41\uff4c", "phys-ical"]
    )
    def test_reserved_scope_in_any_spelling_is_refused(self, tmp_path: Path, scope: str) -> None:
        """A user gate may not claim the reserved scope physical in any case, spacing or width."""
        f = tmp_path / "g.toml"
        f.write_text(f'[gate]\nname = "mine"\nscope = "{scope}"\n[exit]\ncode = 0\n', encoding="utf-8")
        with pytest.raises(GateFileError, match="reserved"):
            load_user_gate(f)
        f.write_text(
            f'[gate]\nname = "mine"\n[[part]]\nname = "p"\nscope = "{scope}"\n[[part.step]]\nname = "s"\n',
            encoding="utf-8",
        )
        with pytest.raises(GateFileError, match="reserved"):
            load_user_gate(f)


def _default_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


class TestInterrupted:
    def test_command_that_survives_sigint_does_not_pass_exit_zero(self, tmp_path: Path) -> None:
        """A command that catches the forwarded SIGINT and exits 0 is inconclusive under exit-zero (exit 3)."""
        out = tmp_path / "int.aos"
        script = "trap 'exit 0' INT; echo ready; while :; do sleep 0.05; done"
        proc = subprocess.Popen(
            [ALPHA, "observe", "gate", "exit-zero", "--out", str(out), "--", "sh", "-c", script],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=_default_signals,
        )
        try:
            wait_for(lambda: b"ready" in recorded_stdout_so_far(out))
            proc.send_signal(signal.SIGINT)
            stdout, _ = proc.communicate(timeout=60)
        finally:
            proc.kill()
        assert 3 == proc.returncode, stdout
        verdict = alpha("observe", "verdict", str(out))
        assert 3 == verdict.returncode
        assert b"interrupted" in verdict.stdout

    def test_exit_rule_interrupted_can_be_fail(self) -> None:
        """The exit rule's ``interrupted`` key takes fail or inconclusive, and defaults to inconclusive."""
        gate = parse_gate_text('[gate]\nname = "g"\n[exit]\ncode = 0\ninterrupted = "fail"\n', "t.toml")
        assert "fail" == gate.rules[0].interrupted  # type: ignore[union-attr]
        gate = parse_gate_text('[gate]\nname = "g"\n[exit]\ncode = 0\n', "t.toml")
        assert "inconclusive" == gate.rules[0].interrupted  # type: ignore[union-attr]


class TestSummaryNeverSaysPassWhenInconclusive:
    def test_damaged_stream_summary(self, tmp_path: Path) -> None:
        """A re-evaluated damaged stream is inconclusive, and its summary does not begin with pass."""
        _proc, path = record(tmp_path, ["true"])
        cut = tmp_path / "cut.aos"
        cut.write_bytes(path.read_bytes()[:-200])
        v = evaluate_stream(resolve_gate("exit-zero"), cut)
        assert "inconclusive" == v.verdict
        assert v.summary.startswith("inconclusive"), v.summary


def _random_value(rng: random.Random, depth: int = 0) -> str:
    choice = rng.randrange(8 if depth < 3 else 5)
    if choice == 0:
        return str(rng.randrange(-5, 5))
    if choice == 1:
        return rng.choice(['"x"', '"pass"', '"fail"', '""', '"a.b"', '"step:x"', '"nonzero"'])
    if choice == 2:
        return rng.choice(["true", "false", "1.5", "nan", "inf"])
    if choice == 3:
        return "[]"
    if choice == 4:
        return '"1979-05-27T07:32:00Z"' if rng.random() < 0.5 else "1979-05-27"
    if choice == 5:
        return "[" + ", ".join(_random_value(rng, depth + 1) for _ in range(rng.randrange(3))) + "]"
    keys = ["name", "code", "min", "max", "count", "status", "where", "schema", "glob", "values", "on", "uses",
            "args", "when", "env", "label", "equals", "sequence", "receipt", "needs", "path", "id"]  # fmt: skip
    items = [f"{rng.choice(keys)} = {_random_value(rng, depth + 1)}" for _ in range(rng.randrange(4))]
    return "{ " + ", ".join(dict.fromkeys(items)) + " }"


class TestRandomAndDeepGateFiles:
    def test_random_gate_files_are_refused_by_name(self, tmp_path: Path) -> None:
        """Random gate files either load or raise GateFileError: never another exception."""
        rng = random.Random(7)
        tables = ["gate", "exit", "step", "receipt", "artifact", "equal", "each", "order", "check", "part"]
        keys = [
            "name", "code", "min", "max", "count", "status", "where", "schema", "glob", "values", "on", "uses",
            "args", "when", "scope", "otherwise", "unfinished", "interrupted", "exit", "stderr_contains",
            "artifacts", "sha256_from", "step", "equal", "needs", "receipt", "sequence",
        ]  # fmt: skip
        for i in range(400):
            lines = ['[gate]\nname = "g"'] if rng.random() < 0.8 else []
            for _ in range(rng.randrange(4)):
                table = rng.choice(tables)
                lines.append(f"[[{table}]]" if table not in ("gate", "exit") else f"[{table}]")
                for key in dict.fromkeys(rng.choice(keys) for _ in range(rng.randrange(5))):
                    lines.append(f"{key} = {_random_value(rng)}")
            text = "\n".join(lines) + "\n"
            with contextlib.suppress(GateFileError):
                parse_gate_text(text, f"random-{i}.toml")

    @pytest.mark.parametrize(
        "text",
        [
            "a = " + "[" * 50000 + "]" * 50000,
            "a = " + "{b = " * 5000 + "1" + "}" * 5000,
            '[gate]\nname = "g"\n[[receipt]]\nname = "r"\nschema = ' + "{ not = " * 3000 + "{}" + " }" * 3000,
            '[gate]\nname = "g"\n[[receipt]]\nname = "r"\nwhere = ' + "{ a = " * 3000 + "1" + " }" * 3000,
        ],
    )
    def test_deeply_nested_files_are_a_usage_error(self, tmp_path: Path, text: str) -> None:
        """Deeply nested gate files are refused (exit 2, gate-file), never a traceback."""
        f = tmp_path / "deep.toml"
        f.write_text(text)
        proc = alpha("observe", "gate", "g", "--gate-file", str(f), "--out", str(tmp_path / "d.aos"), "--", "true")
        assert 2 == proc.returncode
        assert b"Traceback" not in proc.stderr
        assert b"gate-file" in proc.stderr

    def test_gate_file_that_is_a_fifo_is_refused(self, tmp_path: Path) -> None:
        """A FIFO given as --gate-file is refused at once, never waited on."""
        import os

        fifo = tmp_path / "g.toml"
        os.mkfifo(fifo)
        proc = alpha("observe", "gate", "g", "--gate-file", str(fifo), "--", "true", timeout=60)
        assert 2 == proc.returncode
        assert b"not a regular file" in proc.stderr


class TestOutputFreeOfInLinearTime:
    def test_pathological_pattern_over_output(self, tmp_path: Path) -> None:
        """output-free-of with ``(a+)+$`` over a long 'aaaa…!' output ends at once (no match: pass)."""
        f = _gate_file(
            tmp_path, '[[check]]\nname = "output-free-of"\nargs = { patterns = ["(a+)+$"], streams = ["stdout"] }\n'
        )
        out = tmp_path / "o.aos"
        proc = alpha(
            "observe", "gate", "g", "--gate-file", str(f), "--out", str(out), "--quiet", "--",
            "printf", "a" * 5000 + "!",
            timeout=120,
        )  # fmt: skip
        assert 0 == proc.returncode, proc.stdout + proc.stderr

    def test_pattern_re2_cannot_run_is_refused(self) -> None:
        """A backreference in output-free-of's patterns is refused when the gate file is read."""
        text = '[gate]\nname = "g"\n[[check]]\nname = "output-free-of"\nargs = { patterns = ["(a)\\\\1"] }\n'
        with pytest.raises(GateFileError, match="linear time"):
            parse_gate_text(text, "t.toml")


class TestArtifactGlobInLinearTime:
    def test_pathological_glob_against_a_long_path(self) -> None:
        """A gate's artifact glob ``*a*a*a*a*a*a*a*a*b`` against a long path answers at once (RE2)."""
        from gates.evidence import glob_match

        assert not glob_match("*a" * 12 + "*b", "a" * 200)
        assert glob_match("out/**/*.json", "out/a/b/c.json")
        assert not glob_match("*.txt", "a/b.txt")
