"""What every attestation shares: the in-toto Statement, its DSSE envelope, its Sigstore bundle.

``envelope`` serialises a Statement (UTF-8 JSON, sorted keys, no spaces), signs
it with an Ed25519 key over the DSSE pre-authentication encoding (unsigned, the
``signatures`` list is empty) and returns an :class:`Attestation`, which also
writes the same envelope as a Sigstore bundle (v0.3) whose verification
material is the signing key's id as a public-key hint. The verification
summary (``observe.interop.attest``), the SLSA provenance
(``observe.interop.provenance``) and the test result
(``observe.interop.test_result``) are Statements made here.
"""

from __future__ import annotations

import base64
import datetime
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aos.signing import Signer
    from gates.language import Gate

__all__ = [
    "BUNDLE_MEDIA_TYPE",
    "PAYLOAD_TYPE",
    "STATEMENT_TYPE",
    "Attestation",
    "envelope",
    "pae",
    "rfc3339",
    "tool_version",
]

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
#: The Sigstore bundle format ``attest --bundle`` writes (protobuf-specs ``Bundle``, JSON).
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"


def pae(payload_type: str, payload: bytes) -> bytes:
    """Return the DSSE v1 pre-authentication encoding: ``DSSEv1 SP LEN(type) SP type SP LEN(body) SP body``."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def rfc3339(when: datetime.datetime) -> str:
    """Return ``when`` as RFC 3339 UTC text to the second (``2026-01-02T03:04:05Z``)."""
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def tool_version() -> str:
    """Return this tool's installed version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("alpha-observe")
    except PackageNotFoundError:  # pragma: no cover - running from a tree that was never installed
        return "0+unknown"


@dataclass(frozen=True)
class Attestation:
    """What ``attest`` made, and what it tells a person about it (``notes``).

    ``result`` is the predicate's outcome where it has one (``PASSED``/``FAILED``/
    ``WARNED``), and ``gate`` the policy it restates; a provenance has neither
    necessarily.
    """

    statement: dict[str, Any]
    envelope: dict[str, Any]
    result: str | None
    gate: Gate | None
    key_id: str | None
    notes: list[str] = field(default_factory=list)

    def envelope_bytes(self) -> bytes:
        """Return the envelope as written: JSON, one line, newline-terminated."""
        return (json.dumps(self.envelope, sort_keys=True) + "\n").encode("utf-8")

    def bundle(self) -> dict[str, Any]:
        """Return the same envelope as a Sigstore bundle v0.3: the signing key's id as a public-key hint.

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
        """Return the bundle as written: JSON, one line, newline-terminated."""
        return (json.dumps(self.bundle(), sort_keys=True) + "\n").encode("utf-8")


def envelope(
    statement: dict[str, Any],
    signer: Signer | None,
    *,
    result: str | None = None,
    gate: Gate | None = None,
    notes: list[str] | None = None,
) -> Attestation:
    """Return ``statement`` in a DSSE envelope, signed by ``signer`` (unsigned without one)."""
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    said = list(notes or [])
    signatures: list[dict[str, str]] = []
    if signer is not None:
        sig = signer.private.sign(pae(PAYLOAD_TYPE, payload))
        signatures.append({"keyid": signer.key_id, "sig": base64.b64encode(sig).decode("ascii")})
        said.append(f"envelope: signed by key {signer.key_id}")
    else:
        said.append("envelope: the statement is unsigned (signatures is empty; give --sign-key KEY to sign it)")
    env = {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": signatures,
    }
    return Attestation(statement, env, result, gate, signer.key_id if signer else None, said)
