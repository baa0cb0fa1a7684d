"""Gate evaluation in bounded memory (issue 36) gives the verdicts it gave before, on every stream the repo holds.

``verdicts_kept.json`` holds, for each stream under tests/assets and samples/ and each gate
(the built-ins and the sample gate files), the SHA-256 of the sealed attrs of the verdict
``evaluate_stream`` gave before the evidence dropped the output events, the stdout and the
unread stderr (commit 55c98dc). Written by this module run as a script, from the tree whose
verdicts it keeps::

    PYTHONPATH=/path/to/that/tree python tests/gates/test_verdicts_kept.py --write

Beside it, over the same streams: the lean evidence gives the verdict the whole evidence
gives, and the kind and step of every seq a check cites.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from pathlib import Path

import pytest

from aos.canonical import canonical_json
from aos.refusals import Refusal
from gates.engine import evaluate, evaluate_evidence
from gates.evaluation import evaluate_stream
from gates.evidence import Evidence
from gates.language import Gate, parse_gate_text
from gates.registry import builtin_gates

ROOT = Path(__file__).resolve().parents[2]
KEPT = Path(__file__).with_name("verdicts_kept.json")
#: The gate files the repo ships beside its built-ins.
GATE_FILES = (
    "samples/gates/nightly.toml",
    "samples/gates/build-and-test.toml",
    "samples/evidence/one-gpu-h200-ssh/gate.toml",
    "samples/evidence/one-gpu-h200-ssh/before-two-accounts/gate.toml",
)


def streams() -> list[str]:
    """Every stream in tests/assets and samples/, relative to the repo (the bomb left out: it is refused unread)."""
    found = [*ROOT.glob("tests/assets/*.aos"), *ROOT.glob("samples/**/*.aos")]
    return sorted(str(p.relative_to(ROOT)) for p in found if p.name != "bomb-512m.aos")


def gates() -> dict[str, Gate]:
    out = dict(sorted(builtin_gates().items()))
    for rel in GATE_FILES:
        out[rel] = parse_gate_text((ROOT / rel).read_text(), rel)
    return out


def digests(rel: str) -> dict[str, str]:
    """Each gate's verdict over the stream ``rel``, as the SHA-256 of its sealed attrs. The stream is named by
    its path in the repo, from the repo's root: a refusal's reason names it, and the digests must not depend on
    where the checkout lies."""
    with contextlib.chdir(ROOT):
        return {
            name: hashlib.sha256(canonical_json(evaluate_stream(gate, Path(rel)).to_attrs()).encode()).hexdigest()
            for name, gate in gates().items()
        }


def test_every_stream_and_gate_is_kept() -> None:
    kept = json.loads(KEPT.read_text())
    assert sorted(kept) == streams()
    assert all(sorted(v) == sorted(gates()) for v in kept.values())


@pytest.mark.parametrize("rel", streams())
def test_verdicts_as_before(rel: str) -> None:
    kept = json.loads(KEPT.read_text())[rel]
    assert [] == [name for name, d in digests(rel).items() if kept[name] != d]


@pytest.mark.parametrize("rel", streams())
def test_lean_evidence_gives_the_whole_evidence_verdict_and_citations(rel: str) -> None:
    from aos.reader import read_stream

    try:
        events = read_stream(ROOT / rel).events
    except Refusal:
        return  # refused before any event: evaluate_stream's verdict says so, and is kept above
    for gate in gates().values():
        whole = Evidence(events)
        verdict = evaluate_evidence(gate, whole)
        assert verdict.to_attrs() == evaluate(gate, iter(events)).to_attrs()
        lean = Evidence(iter(events), keep_output=False, stderr_of=())
        cited = {s for c in verdict.checks for s in c.evidence}
        assert whole.cite(cited) == lean.cite(cited)
        assert whole.cite(cited) == {e.seq: (e.kind, e.step) for e in events if e.seq in cited}


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    KEPT.write_text(json.dumps({rel: digests(rel) for rel in streams()}, indent=1, sort_keys=True) + "\n")
