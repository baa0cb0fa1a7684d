"""A check citing more seqs than a sealed verdict keeps cites the lowest ones and counts the rest, deterministically."""

from __future__ import annotations

from pathlib import Path

import pytest

from aos.refusals import StreamVerdict
from aos.verify import verify_stream
from aos.writer import StreamWriter
from gates.verdict import MAX_EVIDENCE, Check, Verdict

CITED = 2_000_000


def _verdict() -> Verdict:
    many = Check("every-event", "fail", "each cited event failed", tuple(range(CITED, 0, -1)))
    return Verdict.of("g", "s", [many, Check("few", "pass", "ok", (3, 1, 2))], "fail")


def test_a_check_citing_millions_of_seqs_seals_within_the_bound(tmp_path: Path) -> None:
    """The verdict of a check citing 2,000,000 seqs seals, verifies, and reads back equal to a fresh evaluation."""
    attrs = _verdict().to_attrs()
    many, few = attrs["checks"]
    assert (list(range(1, MAX_EVIDENCE + 1)), CITED - MAX_EVIDENCE) == (many["evidence"], many["evidence_omitted"])
    assert ([1, 2, 3], False) == (few["evidence"], "evidence_omitted" in few)
    with StreamWriter(tmp_path / "s.aos", background_flush=False) as w:
        w.append("verdict", attrs)
        w.seal()
    sealed = verify_stream(tmp_path / "s.aos").verdict
    assert _verdict().to_attrs() == sealed
    assert sealed == Verdict.from_attrs(sealed or {}).to_attrs()


@pytest.mark.parametrize("omitted", [-1, "5", True, 1.5])
def test_a_malformed_evidence_omitted_is_refused(omitted: object) -> None:
    """A sealed check whose evidence_omitted is not a count is a malformed verdict."""
    check = {"name": "a", "status": "pass", "reason": "", "evidence": [], "evidence_omitted": omitted}
    with pytest.raises(StreamVerdict, match="evidence_omitted"):
        Verdict.from_attrs({"gate": "g", "verdict": "pass", "scope": "s", "checks": [check]})
