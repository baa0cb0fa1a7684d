"""Attest a sealed verdict: a DSSE envelope of an in-toto Statement whose predicate is a SLSA VSA.

``attest`` reads the stream once and verifies those bytes (``verify``'s refusals,
by name), then re-checks the sealed verdict before it says anything about it:

- the gate that sealed it is found by name *and* digest (a built-in gate, or a
  ``--gate-file``), else ``attest-policy``: a policy is attested only by the
  digest of a definition the attester holds;
- a fresh evaluation of that gate over the sealed events before the verdict
  gives the same verdict, scope and check statuses, else ``stream-verdict``
  (so a verdict edited and re-chained in an unsigned stream is not attested).

The Statement (in-toto Statement v1) names the stream file by SHA-256 (and
BLAKE3 on request) and carries a SLSA verification summary v1: ``PASSED`` only for a
``pass`` verdict (``fail`` and ``inconclusive`` are ``FAILED``), the verified
level ``ALPHA_OBSERVE_SCOPE_<SCOPE>``. Its verifier is the attester id the user
gives; its policy and resource URIs the user's, else location-free names
(``observe.interop.identity``).
The envelope and bundle are ``observe.interop.envelope``'s. docs/CI.md ("Attesting")
is the reference.
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import os
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos import kinds
from aos.refusals import StreamVerdict
from observe.env import RecorderVars
from observe.interop.envelope import (
    BUNDLE_MEDIA_TYPE,
    PAYLOAD_TYPE,
    STATEMENT_TYPE,
    Attestation,
    envelope,
    pae,
    rfc3339,
    tool_version,
)
from observe.interop.identity import DETAILS, Identity, gate_uri, stream_uri
from observe.refusals import AttestPolicy

if TYPE_CHECKING:
    from aos.signing import Signer, Verifier
    from gates.language import Gate
    from gates.verdict import Verdict
    from observe.interop.verified import VerifiedStream

__all__ = [
    "BUNDLE_MEDIA_TYPE",
    "DIGESTS",
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "Attestation",
    "attest",
    "digests_of",
    "level",
    "pae",
    "seal_notes",
    "verified",
    "verified_gate",
]

PREDICATE_TYPE = "https://slsa.dev/verification_summary/v1"
SLSA_VERSION = "1.0"
#: The digests a subject can carry, in the order written; sha256 always, blake3 on request.
DIGESTS = ("sha256", "blake3")


def digests_of(data: bytes | bytearray, requested: Sequence[str], blake3_hex: str | None = None) -> dict[str, str]:
    """Return the subject digests of ``data``: sha256, and blake3 when ``requested`` names it."""
    unknown = [d for d in requested if d not in DIGESTS]
    if unknown:
        raise ValueError(f"digests must be some of {DIGESTS}, not {list(requested)}")
    out = {"sha256": hashlib.sha256(data).hexdigest()}
    if "blake3" in requested:
        if blake3_hex is None:
            from blake3 import blake3

            blake3_hex = blake3(bytes(data)).hexdigest()
        out["blake3"] = blake3_hex
    return out


def level(scope: str) -> str:
    """The project-specific SLSA ``verifiedLevels`` value for a pass of ``scope``.

    ``ALPHA_OBSERVE_SCOPE_`` and the scope upper-cased, every character other than
    A-Z and 0-9 as ``_`` (custom levels must not start with ``SLSA_``).
    """
    return RecorderVars.SCOPE_PREFIX + re.sub(r"[^A-Z0-9]", "_", scope.upper())


def _policy_gate(sealed: dict[str, Any], gate_files: Sequence[str | os.PathLike[str]]) -> Gate:
    """The gate that sealed the verdict, found by name and digest."""
    from gates.language import load_gate
    from gates.registry import builtin_gates

    name, digest = sealed.get("gate"), sealed.get("gate_sha256")
    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise AttestPolicy(f"the sealed verdict of gate {name!r} names no gate digest (gate_sha256)")
    seen: list[str] = []
    for path in gate_files:
        g = load_gate(Path(path))  # gate-file for a malformed file
        if g.name == name and g.digest == digest:
            return g
        seen.append(f"{g.name} {g.digest[:12]} ({path})")
    builtin = builtin_gates().get(str(name))
    if builtin is not None and builtin.digest == digest:
        return builtin
    if builtin is not None:
        seen.append(f"built-in {builtin.name} {builtin.digest[:12]}")
    held = f"; held: {', '.join(seen)}" if seen else ""
    raise AttestPolicy(
        f"the verdict was sealed by gate {name!r} with sha256 {digest}; no gate of that name and digest is "
        f"held here (give its definition with --gate-file){held}"
    )


def _recheck(stream: VerifiedStream, got: Verdict, gate: Gate) -> None:
    """``stream-verdict`` unless a fresh evaluation of ``gate`` over the sealed events gives the sealed verdict."""
    from gates.evaluation import evaluate_events

    seq = stream.verification.verdict_seq
    assert seq is not None
    fresh = evaluate_events(gate, itertools.takewhile(lambda e: e.seq < seq, stream.events()))
    want = [(c.name, c.status) for c in fresh.checks]
    have = [(c.name, c.status) for c in got.checks]
    if (got.verdict, got.scope, have) != (fresh.verdict, fresh.scope, want):
        differ = [f"{n}: sealed {s}" for n, s in have if (n, s) not in want]
        differ += [f"{n}: fresh {s}" for n, s in want if (n, s) not in have]
        opened = next((e for e in stream.events() if e.kind == kinds.STREAM_OPEN), None)
        recorded = opened.attrs.get("version") if opened is not None else None
        hint = ""
        if isinstance(recorded, str) and recorded != tool_version():
            hint = f" (recorded by alpha-observe {recorded}, this is {tool_version()}: attest with that version)"
        raise StreamVerdict(
            f"the sealed verdict ({got.verdict}, scope {got.scope}) is not what gate {gate.name} gives over the "
            f"sealed events ({fresh.verdict}, scope {fresh.scope}); {'; '.join(differ) or 'checks differ'}{hint}"
        )


def seal_notes(v: Any, signer: Signer | None) -> list[str]:
    """Return what ``attest`` says of the stream's seal: unsigned, checked, or not checked."""
    if not v.signed:
        return ["seal: unsigned (the chain proves integrity against accident, not against a forger)"]
    if v.signature_checked:
        return [f"seal: signed by key {v.key_id}, signature checked"]
    return [f"seal: names key {v.seal.get('key_id')}; its signature was NOT checked (give --key PUBKEY to require it)"]


def verified(path: str | os.PathLike[str], signer: Signer | None, seal_key: Verifier | None) -> VerifiedStream:
    """Read and verify the stream at ``path`` once (``verify``'s refusals).

    ``seal_key``: the seal must be signed by it (``stream-signature`` otherwise).
    Without it, a seal that names ``signer``'s key is checked against that key;
    a seal signed by another key is reported, its signature unchecked.
    """
    from aos.signing import Verifier
    from aos.verify import verify_stream
    from observe.interop.verified import load_verified

    stream = load_verified(path, seal_key)
    v = stream.verification
    if seal_key is None and signer is not None and v.signed and v.seal.get("key_id") == signer.key_id:
        # the same bytes again, now with the signature checked: never a second read of the path
        v = verify_stream(stream.path, Verifier(signer.private.public_key()), data=stream.data)
        stream = replace(stream, verification=v)
    return stream


def verified_gate(stream: VerifiedStream, gate_files: Sequence[str | os.PathLike[str]]) -> tuple[Verdict, Gate]:
    """Return the stream's sealed verdict and its gate, re-checked (``stream-verdict``, ``attest-policy``)."""
    from aos.verify import require_verdict
    from gates.verdict import Verdict

    sealed = require_verdict(stream.verification)
    got = Verdict.from_attrs(sealed)  # stream-verdict when malformed
    gate = _policy_gate(sealed, gate_files)
    _recheck(stream, got, gate)
    return got, gate


def attest(
    path: str | os.PathLike[str],
    *,
    identity: Identity,
    signer: Signer | None = None,
    seal_key: Verifier | None = None,
    gate_files: Sequence[str | os.PathLike[str]] = (),
    digests: Sequence[str] = ("sha256",),
    now: datetime.datetime | None = None,
) -> Attestation:
    """Verify the stream at ``path``, re-check its sealed verdict, and make the envelope.

    ``identity``: the attester id (``attest-identity`` without one) and the policy
    and resource URIs, each stated only when given. ``digests``: the subject
    carries sha256, and blake3 when named.
    """
    verifier_id = identity.attester()
    stream = verified(path, signer, seal_key)
    v = stream.verification
    got, gate = verified_gate(stream, gate_files)

    verdict, scope = got.verdict, got.scope
    result = "PASSED" if verdict == "pass" else "FAILED"
    p = stream.path
    policy = {"name": gate.name, "uri": identity.policy_uri or gate_uri(gate.name), "digest": {"sha256": gate.digest}}
    predicate: dict[str, Any] = {
        "verifier": {"id": verifier_id, "version": {"alpha-observe": tool_version()}},
        "timeVerified": rfc3339(now or datetime.datetime.now(datetime.UTC)),
        "resourceUri": identity.resource_uri or stream_uri(v.stream_id),
    }
    statement: dict[str, Any] = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": p.name, "digest": digests_of(stream.data, digests, v.file_blake3)}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            **predicate,
            "policy": policy,
            "inputAttestations": [],
            "verificationResult": result,
            "verifiedLevels": [level(scope)] if result == "PASSED" else ["FAILED"],
            "slsaVersion": SLSA_VERSION,
            DETAILS: {
                "stream_id": v.stream_id,
                "gate": gate.name,
                "verdict": verdict,
                "scope": scope,
                "checks": [{"name": c.name, "status": c.status} for c in got.checks],
                "not_run": got.extra.get("not_run", []),
                "seal": {
                    "events": v.events,
                    "head": v.head,
                    "signed": v.signed,
                    "key_id": v.seal.get("key_id"),
                    "signature_checked": v.signature_checked,
                },
            },
        },
    }
    notes = [f"{p}: gate {gate.name}: {verdict} (scope {scope}) -> verificationResult {result}"]
    notes += seal_notes(v, signer)
    return envelope(statement, signer, result=result, gate=gate, notes=notes)
