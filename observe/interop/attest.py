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
BLAKE3) and carries a SLSA verification summary v1: ``PASSED`` only for a
``pass`` verdict (``fail`` and ``inconclusive`` are ``FAILED``), the verified
level ``ALPHA_OBSERVE_SCOPE_<SCOPE>``. The envelope is signed with an Ed25519 key
over the DSSE pre-authentication encoding; unsigned, its ``signatures`` list is
empty. ``Attestation.bundle`` wraps the same envelope in a Sigstore bundle (v0.3)
whose verification material is the signing key's id as a public-key hint, for
Sigstore verifiers given that public key. docs/CI.md ("Attesting") is the reference.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import itertools
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos import kinds
from aos.refusals import StreamVerdict
from observe.env import RecorderVars
from observe.refusals import AttestPolicy

if TYPE_CHECKING:
    from aos.signing import Signer, Verifier
    from gates.language import Gate
    from gates.verdict import Verdict
    from observe.interop.verified import VerifiedStream

__all__ = [
    "BUNDLE_MEDIA_TYPE",
    "DIGESTS",
    "EXTENSION",
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "VERIFIER_ID",
    "Attestation",
    "attest",
    "level",
    "pae",
]

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/verification_summary/v1"
#: The verifier's identity: the tool's Package URL (its version is in ``verifier.version``).
VERIFIER_ID = "pkg:pypi/alpha-observe"
#: The predicate's extension field (in-toto: extension field names are URIs): alpha-observe's own detail.
EXTENSION = VERIFIER_ID
SLSA_VERSION = "1.0"
#: The Sigstore bundle format ``attest --bundle`` writes (protobuf-specs ``Bundle``, JSON).
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
#: The digests of the stream file a subject can carry, in the order written.
DIGESTS = ("sha256", "blake3")


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: ``DSSEv1 SP LEN(type) SP type SP LEN(body) SP body``."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def level(scope: str) -> str:
    """The project-specific SLSA ``verifiedLevels`` value for a pass of ``scope``.

    ``ALPHA_OBSERVE_SCOPE_`` and the scope upper-cased, every character other than
    A-Z and 0-9 as ``_`` (custom levels must not start with ``SLSA_``).
    """
    return RecorderVars.SCOPE_PREFIX + re.sub(r"[^A-Z0-9]", "_", scope.upper())


@dataclass(frozen=True)
class Attestation:
    """What ``attest`` made, and what it tells a person about it (``notes``)."""

    statement: dict[str, Any]
    envelope: dict[str, Any]
    result: str
    gate: Gate
    key_id: str | None
    notes: list[str] = field(default_factory=list)

    def envelope_bytes(self) -> bytes:
        """The envelope as written: JSON, one line, newline-terminated."""
        return (json.dumps(self.envelope, sort_keys=True) + "\n").encode("utf-8")

    def bundle(self) -> dict[str, Any]:
        """The same envelope as a Sigstore bundle v0.3: the signing key's id as a public-key hint, no log entries.

        A Sigstore verifier checks it with the attester's public key given as trusted
        material under that hint, and no transparency log or timestamp required.
        Only a signed attestation has a bundle (``ValueError`` otherwise).
        """
        if self.key_id is None:
            raise ValueError("an unsigned attestation has no Sigstore bundle")
        return {
            "mediaType": BUNDLE_MEDIA_TYPE,
            "verificationMaterial": {
                "publicKey": {"hint": self.key_id},
                "tlogEntries": [],
            },
            "dsseEnvelope": self.envelope,
        }

    def bundle_bytes(self) -> bytes:
        """The bundle as written: JSON, one line, newline-terminated."""
        return (json.dumps(self.bundle(), sort_keys=True) + "\n").encode("utf-8")


def _rfc3339(when: datetime.datetime) -> str:
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _tool_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("alpha-observe")
    except PackageNotFoundError:  # pragma: no cover - running from a tree that was never installed
        return "0+unknown"


def _policy_gate(sealed: dict[str, Any], gate_files: Sequence[str | os.PathLike[str]]) -> tuple[Gate, str]:
    """The gate that sealed the verdict, found by name and digest; and the URI naming its definition."""
    from gates.language import load_gate
    from gates.registry import builtin_gates

    name, digest = sealed.get("gate"), sealed.get("gate_sha256")
    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise AttestPolicy(f"the sealed verdict of gate {name!r} names no gate digest (gate_sha256)")
    seen: list[str] = []
    for path in gate_files:
        g = load_gate(Path(path))  # gate-file for a malformed file
        if g.name == name and g.digest == digest:
            return g, Path(path).resolve().as_uri()
        seen.append(f"{g.name} {g.digest[:12]} ({path})")
    builtin = builtin_gates().get(str(name))
    if builtin is not None and builtin.digest == digest:
        entry = builtin.source.removeprefix("builtin:")
        return builtin, f"{VERIFIER_ID}@{_tool_version()}#gates/builtin/{entry}"
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
        if isinstance(recorded, str) and recorded != _tool_version():
            hint = f" (recorded by alpha-observe {recorded}, this is {_tool_version()}: attest with that version)"
        raise StreamVerdict(
            f"the sealed verdict ({got.verdict}, scope {got.scope}) is not what gate {gate.name} gives over the "
            f"sealed events ({fresh.verdict}, scope {fresh.scope}); {'; '.join(differ) or 'checks differ'}{hint}"
        )


def _seal_notes(v: Any, signer: Signer | None) -> list[str]:
    if not v.signed:
        return ["seal: unsigned (the chain proves integrity against accident, not against a forger)"]
    if v.signature_checked:
        return [f"seal: signed by key {v.key_id}, signature checked"]
    return [f"seal: names key {v.seal.get('key_id')}; its signature was NOT checked (give --key PUBKEY to require it)"]


def attest(
    path: str | os.PathLike[str],
    *,
    signer: Signer | None = None,
    seal_key: Verifier | None = None,
    gate_files: Sequence[str | os.PathLike[str]] = (),
    resource_uri: str | None = None,
    digests: Sequence[str] = DIGESTS,
    now: datetime.datetime | None = None,
) -> Attestation:
    """Verify the stream at ``path``, re-check its sealed verdict, and make the envelope.

    ``seal_key``: the seal must be signed by it (``stream-signature`` otherwise).
    Without it, a seal that names ``signer``'s key is checked against that key;
    a seal signed by another key is reported, its signature unchecked.
    ``digests``: which of ``DIGESTS`` the subject carries (``("sha256",)`` for
    consumers that refuse a digest they do not know).
    """
    from aos.signing import Verifier
    from aos.verify import require_verdict, verify_stream
    from gates.verdict import Verdict
    from observe.interop.verified import load_verified

    unknown = [d for d in digests if d not in DIGESTS]
    if unknown or not digests:
        raise ValueError(f"digests must be some of {DIGESTS}, not {list(digests)}")
    stream = load_verified(path, seal_key)
    v = stream.verification
    if seal_key is None and signer is not None and v.signed and v.seal.get("key_id") == signer.key_id:
        # the same bytes again, now with the signature checked: never a second read of the path
        v = verify_stream(stream.path, Verifier(signer.private.public_key()), data=stream.data)
        stream = replace(stream, verification=v)
    sealed = require_verdict(v)
    got = Verdict.from_attrs(sealed)  # stream-verdict when malformed
    gate, policy_uri = _policy_gate(sealed, gate_files)
    _recheck(stream, got, gate)

    verdict, scope = got.verdict, got.scope
    result = "PASSED" if verdict == "pass" else "FAILED"
    p = stream.path
    statement: dict[str, Any] = {
        "_type": STATEMENT_TYPE,
        "subject": [
            {
                "name": p.name,
                "digest": {
                    d: hashlib.sha256(stream.data).hexdigest() if d == "sha256" else v.file_blake3
                    for d in DIGESTS
                    if d in digests
                },
            }
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "verifier": {"id": VERIFIER_ID, "version": {"alpha-observe": _tool_version()}},
            "timeVerified": _rfc3339(now or datetime.datetime.now(datetime.UTC)),
            "resourceUri": resource_uri or p.resolve().as_uri(),
            "policy": {"name": gate.name, "uri": policy_uri, "digest": {"sha256": gate.digest}},
            "inputAttestations": [],
            "verificationResult": result,
            "verifiedLevels": [level(scope)] if result == "PASSED" else ["FAILED"],
            "slsaVersion": SLSA_VERSION,
            EXTENSION: {
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
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    signatures: list[dict[str, str]] = []
    notes = [f"{p}: gate {gate.name}: {verdict} (scope {scope}) -> verificationResult {result}"]
    notes += _seal_notes(v, signer)
    if signer is not None:
        sig = signer.private.sign(pae(PAYLOAD_TYPE, payload))
        signatures.append({"keyid": signer.key_id, "sig": base64.b64encode(sig).decode("ascii")})
        notes.append(f"envelope: signed by key {signer.key_id}")
    else:
        notes.append("envelope: the statement is unsigned (signatures is empty; give --key KEY to sign it)")
    envelope = {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": signatures,
    }
    return Attestation(statement, envelope, result, gate, signer.key_id if signer else None, notes)
