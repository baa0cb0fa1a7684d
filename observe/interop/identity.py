"""The names an attestation states, each from the user's settings or this registry, once.

An attestation names its attester (the VSA's ``verifier.id``, the provenance's
``runDetails.builder.id``), its policy (``policy.uri``) and the resource
verified (``resourceUri``). The attester never defaults: it is an identity only
the user owns (``--attester-id`` or ``$ALPHA_ATTESTER_ID``; none given is
``attest-identity``). The VSA spec requires the other two, so where the user
gives none they are this project's location-free names (``gate_uri``: the gate
by name, its digest beside it; ``stream_uri``: the stream by its id), never a
package this project does not own nor the runner's absolute ``file://`` path.

The URIs that are this project's own (these, the provenance's ``buildType``, the
extension field that carries alpha-observe's details) are URNs under
``urn:alpha-observe:``: the project owns no domain and no package-registry
name, so it names nothing it would have to resolve; docs/CI.md ("Attesting",
"Provenance and test results") is their definition.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from observe.env import AttestVars
from observe.refusals import AttestIdentity

__all__ = ["BUILD_TYPE", "DETAILS", "URI", "Identity", "gate_uri", "is_uri", "stream_uri"]

#: The provenance's ``buildDefinition.buildType``: a command recorded by alpha-observe
#: (docs/CI.md, "Provenance and test results").
BUILD_TYPE = "urn:alpha-observe:build-type:recorded-command:v1"
#: The extension field (in-toto: named by a URI) that carries alpha-observe's own details in a predicate.
DETAILS = "urn:alpha-observe:details:v1"
#: What ``attest`` takes as a URI: a scheme, a colon and no whitespace.
URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S+")


def gate_uri(name: str) -> str:
    """Return the default ``policy.uri`` of the gate ``name``: ``urn:alpha-observe:gate:NAME`` (percent-encoded)."""
    from urllib.parse import quote

    return f"urn:alpha-observe:gate:{quote(name, safe='')}"


def stream_uri(stream_id: str) -> str:
    """Return the default ``resourceUri`` of a stream: ``urn:alpha-observe:stream:STREAM_ID``."""
    from urllib.parse import quote

    return f"urn:alpha-observe:stream:{quote(stream_id, safe='')}"


def is_uri(text: str) -> bool:
    """Return whether ``text`` has a URI's shape (``scheme:rest``, no whitespace)."""
    return URI.fullmatch(text) is not None


@dataclass(frozen=True)
class Identity:
    """The identities the user gave ``attest`` (each None when not given)."""

    attester_id: str | None = None
    policy_uri: str | None = None
    resource_uri: str | None = None

    def attester(self) -> str:
        """Return the attester id; raise ``attest-identity`` when none was given or it is not a URI."""
        if self.attester_id is None or not self.attester_id.strip():
            raise AttestIdentity(
                f"no attester id: give --attester-id URI (or set {AttestVars.ATTESTER_ID}), an identity you own, "
                "e.g. your repository's workflow URL; alpha-observe names no attester of its own"
            )
        if not is_uri(self.attester_id):
            raise AttestIdentity(f"the attester id {self.attester_id!r} is not a URI (scheme:rest)")
        return self.attester_id
