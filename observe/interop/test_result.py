"""The in-toto Test Result predicate of the ``[[tests]]`` a sealed verdict judged.

The verdict is re-checked first, as for the verification summary (the gate found
by name and digest, a fresh evaluation giving the sealed verdict), so the
statement says only what the attester reproduces. The cases are read from the
captured bytes of the files the verdict names (``test_files``), never from a
file on disk or a receipt. ``result`` is ``FAILED`` when any ``[[tests]]`` check
did not pass (a ``fail`` or an ``inconclusive``), ``WARNED`` when all passed but
some case was skipped, else ``PASSED``; ``configuration`` names each file read
by its path and SHA-256; passed, skipped (``warnedTests``) and failed or erroring
case ids are listed, each list bounded by ``MAX_IDS`` (the notes say what was
cut). docs/CI.md ("Provenance and test results") is the reference.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from observe.interop.identity import Identity
from observe.refusals import AttestSubject

if TYPE_CHECKING:
    from aos.signing import Signer, Verifier
    from gates.evidence import Evidence
    from gates.testcases import TestCase
    from gates.verdict import Verdict
    from observe.interop.envelope import Attestation

__all__ = ["MAX_IDS", "PREDICATE_TYPE", "attest_test_result", "test_result_predicate"]

PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
#: At most this many ids in each of passedTests, warnedTests and failedTests.
MAX_IDS = 10_000


def _cases(ev: Evidence, v: Verdict) -> tuple[list[TestCase], list[dict[str, Any]], list[str]]:
    """The cases of every file the verdict's ``[[tests]]`` read, those files as ResourceDescriptors, and notes."""
    from gates.results import read_file
    from observe.ci.junit import named_test_files
    from observe.interop.provenance import subject_name

    arts = {a.event.seq: a for a in ev.artifacts}
    cases: list[TestCase] = []
    config: list[dict[str, Any]] = []
    notes: list[str] = []
    seen: set[int] = set()
    for check, fmt, seq in named_test_files(v):
        art = arts.get(seq)
        if art is None or seq in seen:
            continue
        seen.add(seq)
        sha, how = art.sha256()
        if sha is not None:
            config.append({"name": subject_name(art.path), "digest": {"sha256": sha}})
        result = read_file(ev, art, fmt)
        if result.parsed is None:
            notes.append(f"{check}: {art.path} (seq {seq}) not read: {result.problem or how}")
        else:
            cases.extend(result.parsed.cases)
    return cases, config, notes


def _bounded(ids: list[str], label: str, notes: list[str]) -> list[str]:
    if len(ids) > MAX_IDS:
        notes.append(f"{label}: the first {MAX_IDS} of {len(ids)} ids are listed")
    return ids[:MAX_IDS]


def test_result_predicate(ev: Evidence, v: Verdict) -> tuple[dict[str, Any], list[str]]:
    """Return the Test Result predicate of the ``[[tests]]`` checks of ``v`` over ``ev``, and notes.

    ``attest-subject`` when the verdict judged no ``[[tests]]``.
    """
    entries = v.extra.get("test_files")
    # every [[tests]] check has an entry, also one that matched no capture (it has no artifacts then)
    judged = {e.get("check") for e in entries if isinstance(e, dict)} if isinstance(entries, list) else set()
    checks = [c for c in v.checks if c.name in judged]
    if not checks:
        raise AttestSubject(f"gate {v.gate!r} has no [[tests]] check: there is no test result to attest")
    cases, config, notes = _cases(ev, v)
    passed = [c.id for c in cases if c.status == "passed"]
    warned = [c.id for c in cases if c.status == "skipped"]
    failed = [c.id for c in cases if c.status in ("failed", "error")]
    if any(c.status != "pass" for c in checks):
        result = "FAILED"
    elif warned:
        result = "WARNED"
    else:
        result = "PASSED"
    predicate = {
        "result": result,
        "configuration": config,
        "passedTests": _bounded(passed, "passedTests", notes),
        "warnedTests": _bounded(warned, "warnedTests", notes),
        "failedTests": _bounded(failed, "failedTests", notes),
    }
    said = [f"{', '.join(c.name for c in checks)}: {len(passed)} passed, {len(warned)} skipped, {len(failed)} failed"]
    return predicate, said + notes


def attest_test_result(
    path: str | os.PathLike[str],
    *,
    identity: Identity,
    signer: Signer | None = None,
    seal_key: Verifier | None = None,
    gate_files: Sequence[str | os.PathLike[str]] = (),
    patterns: Sequence[str] = (),
    digests: Sequence[str] = ("sha256",),
) -> Attestation:
    """Verify the stream at ``path``, re-check its verdict, and make the envelope of its test result.

    The subjects are the provenance's (the captured files ``patterns`` match);
    ``identity.resource_uri``, when given, is the predicate's ``url``.
    """
    import itertools

    from gates.evidence import Evidence
    from observe.interop.attest import seal_notes, verified, verified_gate
    from observe.interop.envelope import STATEMENT_TYPE, envelope
    from observe.interop.provenance import subjects

    stream = verified(path, signer, seal_key)
    v, gate = verified_gate(stream, gate_files)
    seq = stream.verification.verdict_seq
    ev = Evidence(itertools.takewhile(lambda e: e.seq != seq, stream.events()), keep_output=False)
    found, notes = subjects(ev, patterns, digests)
    if not found:
        raise AttestSubject(f"{stream.path}: the recorder captured no file to name as the subject")
    predicate, said = test_result_predicate(ev, v)
    if identity.resource_uri is not None:
        predicate["url"] = identity.resource_uri
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [s.descriptor() for s in found],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }
    head = [f"{stream.path}: gate {gate.name}: test result {predicate['result']}"]
    return envelope(
        statement,
        signer,
        result=predicate["result"],
        gate=gate,
        notes=head + said + notes + seal_notes(stream.verification, signer),
    )
