"""``alpha observe verdict``: verify first, print the sealed verdict, never re-evaluate."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from aos.canonical import canonical_json
from aos.chain import link
from aos.verify import verify_stream
from gates.testing import SyntheticStream, device_lane
from gates.verdict import Check, Verdict
from tests.helpers.cli import invoke as alpha_invoke


def write_with_verdict(path: Path, verdict: Verdict | None, lane: SyntheticStream | None = None, **kw: object) -> Path:
    """A sealed stream of ``lane`` (default: a command that exited 0) ending with ``verdict``."""
    s = lane or SyntheticStream()
    if lane is None:
        s.exit(0)
    if verdict is not None:
        s.add("verdict", verdict.to_attrs())
    s.write(path, **kw)  # type: ignore[arg-type]
    return path


def invoke(*args: str) -> tuple[int, str, str]:
    r = alpha_invoke("observe", "verdict", *args)
    return r.exit_code, r.stdout, r.stderr


PASS = Verdict.of("exit-zero", "command", [Check("exit-code", "pass", "the command exited 0", (3,))], "pass")
FAIL = Verdict.of("exit-zero", "command", [Check("exit-code", "fail", "the command exited 2", (3,))], "fail")
INCONCLUSIVE = Verdict.of("g", "physical", [Check("step:x", "inconclusive", "never ran")], "inconclusive")


class TestSealedVerdict:
    @pytest.mark.parametrize(
        ("v", "code"), [(PASS, 0), (FAIL, 1), (INCONCLUSIVE, 3)], ids=["pass", "fail", "inconclusive"]
    )
    def test_exit_code_is_the_sealed_verdict(self, tmp_path: Path, v: Verdict, code: int) -> None:
        """verdict exits 0, 1 or 3 as the sealed verdict says, and prints it as a table."""
        got, out, _ = invoke(str(write_with_verdict(tmp_path / "s.aos", v)))
        assert code == got
        assert f"gate {v.gate}: {v.verdict.upper()} (scope {v.scope})" == out.splitlines()[0]

    def test_json(self, tmp_path: Path) -> None:
        """--json prints the sealed verdict attrs, with the stream's path and id."""
        path = write_with_verdict(tmp_path / "s.aos", FAIL)
        code, out, _ = invoke(str(path), "--json")
        expected = {**FAIL.to_attrs(), "stream": str(path), "stream_id": verify_stream(path).stream_id}
        assert (1, expected) == (code, json.loads(out))

    def test_never_re_evaluates(self, tmp_path: Path) -> None:
        """A sealed pass over events that would now fail is still reported as the sealed pass."""
        lane = device_lane()
        lane.one("process.exit")["attrs"]["exit_code"] = 9
        code, _, _ = invoke(str(write_with_verdict(tmp_path / "s.aos", PASS, lane)))
        assert 0 == code

    def test_no_verdict(self, tmp_path: Path) -> None:
        """An intact stream without a verdict is refused as stream-verdict, exit 1."""
        code, out, err = invoke(str(write_with_verdict(tmp_path / "s.aos", None)))
        assert (1, "") == (code, out)
        assert err.startswith("refused: stream-verdict: ")

    def test_missing_stream(self, tmp_path: Path) -> None:
        """A stream that does not exist is refused as stream-missing."""
        code, _, err = invoke(str(tmp_path / "none.aos"))
        assert (1, True) == (code, err.startswith("refused: stream-missing: "))

    def test_unsealed(self, tmp_path: Path) -> None:
        """A stream without a seal is refused, whatever verdict it holds."""
        s = SyntheticStream()
        s.exit(0)
        s.add("verdict", PASS.to_attrs())
        s.write(tmp_path / "s.aos", seal=False)
        code, _, err = invoke(str(tmp_path / "s.aos"))
        assert (1, True) == (code, err.startswith("refused: stream-unsealed: "))


class TestTampering:
    def _verdict_rows(self, surgery: ModuleType, path: Path) -> tuple[object, int, list[dict[str, object]]]:
        parts = surgery.split(path)
        for i, rows in enumerate(surgery.all_rows(parts)):
            if any(r["kind"] == "verdict" for r in rows):
                return parts, i, rows
        raise AssertionError("no verdict batch")

    def test_edited_verdict_refused(self, tmp_path: Path, surgery: ModuleType) -> None:
        """A fail verdict edited into a pass breaks the chain: refused as stream-chain."""
        path = write_with_verdict(tmp_path / "s.aos", FAIL)
        parts, i, rows = self._verdict_rows(surgery, path)
        for r in rows:
            if r["kind"] == "verdict":
                r["attrs"] = canonical_json(PASS.to_attrs())
        parts.batches[i] = surgery.encode_batch(rows, parts.stream_id)  # type: ignore[attr-defined]
        path.write_bytes(parts.join())  # type: ignore[attr-defined]
        code, out, err = invoke(str(path))
        assert (1, "") == (code, out)
        assert err.startswith("refused: stream-chain: ")

    def test_resealed_edit_refused_with_key(self, tmp_path: Path, surgery: ModuleType) -> None:
        """An edited verdict with the chain and seal recomputed by a forger is refused when --key is given."""
        signer = surgery.seeded_signer("verdict-test")
        surgery.write_keys(signer, tmp_path / "k")
        path = write_with_verdict(tmp_path / "s.aos", FAIL, signer=signer)
        parts, i, rows = self._verdict_rows(surgery, path)
        for r in rows:
            if r["kind"] == "verdict":
                r["attrs"] = canonical_json(PASS.to_attrs())
        parts.batches[i] = surgery.encode_batch(rows, parts.stream_id)  # type: ignore[attr-defined]
        path.write_bytes(surgery.reseal(parts).join())
        code, _, err = invoke(str(path), "--key", str(tmp_path / "k.pub"))
        assert (1, True) == (code, err.startswith("refused: stream-signature: "))
        assert 0 == invoke(str(path))[0]  # without a key the chain only guards against accident

    def test_verdict_after_seal_refused(self, tmp_path: Path, surgery: ModuleType) -> None:
        """A pass verdict appended after the seal is refused as stream-seal."""
        path = write_with_verdict(tmp_path / "s.aos", FAIL)
        parts = surgery.split(path)
        seal = surgery.all_rows(parts)[-1][-1]
        row = {
            "seq": seal["seq"] + 1,
            "wall_ns": seal["wall_ns"] + 1,
            "mono_ns": seal["mono_ns"] + 1,
            "kind": "verdict",
            "step": None,
            "attrs": canonical_json(PASS.to_attrs()),
            "data": None,
        }
        row["hash"] = link(
            seal["hash"], row["seq"], row["wall_ns"], row["mono_ns"], "verdict", None, row["attrs"], None
        )
        parts.batches.append(surgery.encode_batch([row], parts.stream_id))
        path.write_bytes(parts.join())
        code, out, err = invoke(str(path))
        assert (1, "") == (code, out)
        assert err.startswith("refused: stream-seal: ")
