"""``attest --bundle`` and ``--digest``, as third-party consumers see them.

The Sigstore bundle is verified by @sigstore/verify under node (tests/js; skipped
with a reason when node or its modules are absent) and read by sigstore-python's
models; the envelope by securesystemslib and in-toto. Every recipe in docs/CI.md
("Verifying an attestation elsewhere") is run as written, and run again on a
forged file, where it must fail.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization

from aos.signing import generate_keypair, load_signer
from gates.testing import SyntheticStream
from observe.cli.root import main
from observe.env import AttestVars
from observe.interop.attest import BUNDLE_MEDIA_TYPE, attest
from observe.interop.identity import DETAILS, Identity
from tests.helpers.paths import ROOT

JS = ROOT / "tests" / "js"
NODE = shutil.which("node")


def node_or_skip() -> str:
    """The node binary, or a skip that says what is missing."""
    if NODE is None:
        pytest.skip("node is not installed (apt-get install nodejs npm); the JavaScript consumers are not run")
    if not (JS / "node_modules" / "@sigstore" / "verify").is_dir():
        pytest.skip("tests/js has no node_modules (npm ci --prefix tests/js); the JavaScript consumers are not run")
    return NODE


def gated(path: Path) -> Path:
    """A sealed exit-zero pass."""
    s = SyntheticStream(gate="exit-zero")
    s.output("stdout", b"hello\n")
    s.exit(0)
    s.add("verdict", s.evaluate("exit-zero").to_attrs())
    s.write(path)
    return path


ATTESTER = "https://ci.example/attester"


def attest_cli(*args: str) -> tuple[int, str]:
    """``alpha observe attest ARGS...`` with the attester id a CI job sets in ``$ALPHA_ATTESTER_ID``."""
    r = CliRunner().invoke(main, ["observe", "attest", *args], env={AttestVars.ATTESTER_ID: ATTESTER})
    return r.exit_code, r.stderr


@pytest.fixture
def signed(tmp_path: Path) -> Path:
    """A folder holding attest.key/.pub, ci.aos, and its envelope and bundle (sha256-only subject)."""
    generate_keypair(tmp_path / "attest")
    gated(tmp_path / "ci.aos")
    code, err = attest_cli(
        str(tmp_path / "ci.aos"),
        "--key",
        str(tmp_path / "attest.key"),
        "-o",
        str(tmp_path / "ci.aos.intoto.json"),
        "--bundle",
        str(tmp_path / "ci.aos.sigstore.json"),
    )
    assert 0 == code, err
    return tmp_path


def blocks(lang: str) -> list[str]:
    """The ``lang`` code blocks of docs/CI.md's "Verifying an attestation elsewhere"."""
    text = (ROOT / "docs" / "CI.md").read_text(encoding="utf-8")
    section = text[text.index("### Verifying an attestation elsewhere") :]
    section = section[: section.index("\n## ")]
    return re.findall(rf"```{lang}\n(.*?)```", section, flags=re.S)


def run_js(script: str, d: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` under node from ``d``, resolving packages from tests/js/node_modules."""
    node = node_or_skip()
    (d / "node_modules").unlink(missing_ok=True)
    (d / "node_modules").symlink_to(JS / "node_modules")
    (d / "verify-bundle.mjs").write_text(script, encoding="utf-8")
    return subprocess.run(
        [node, "verify-bundle.mjs", *args], cwd=d, capture_output=True, text=True, timeout=60, check=False
    )


def run_py(script: str, d: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script], cwd=d, capture_output=True, text=True, timeout=60, check=False
    )


def forge_payload(path: Path, inner: str | None = None) -> None:
    """Replace the verificationResult with PASSED->FAILED in the envelope at ``path`` (or its ``inner`` field)."""
    doc = json.loads(path.read_text())
    env = doc[inner] if inner else doc
    st = json.loads(base64.b64decode(env["payload"]))
    st["predicate"]["verificationResult"] = "FAILED"
    env["payload"] = base64.b64encode(json.dumps(st).encode()).decode()
    path.write_text(json.dumps(doc))


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the bundle ------------------------------------------------------------------------------


class TestBundle:
    def test_bundle_wraps_the_same_envelope(self, signed: Path) -> None:
        """The bundle is v0.3, names the signing key id as its public-key hint and holds the -o envelope as is."""
        bundle = json.loads((signed / "ci.aos.sigstore.json").read_text())
        envelope = json.loads((signed / "ci.aos.intoto.json").read_text())
        signer = load_signer(signed / "attest.key")
        assert BUNDLE_MEDIA_TYPE == bundle["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
        assert {"publicKey": {"hint": signer.key_id}, "tlogEntries": []} == bundle["verificationMaterial"]
        assert envelope == bundle["dsseEnvelope"]

    def test_sigstore_js_verifies_the_bundle(self, signed: Path) -> None:
        """@sigstore/verify, given attest.pub for the hint, verifies the bundle and the subject's sha256."""
        (script,) = blocks("js")
        done = run_js(script, signed, "ci.aos.sigstore.json", "attest.pub", sha256_of(signed / "ci.aos"))
        assert (0, "PASSED\n") == (done.returncode, done.stdout), done.stderr

    @pytest.mark.parametrize("forgery", ["payload", "other-key", "other-digest"])
    def test_sigstore_js_refuses_a_forged_bundle(self, signed: Path, forgery: str) -> None:
        """@sigstore/verify refuses an edited payload, another key and another file's digest."""
        (script,) = blocks("js")
        digest = sha256_of(signed / "ci.aos")
        if forgery == "payload":
            forge_payload(signed / "ci.aos.sigstore.json", "dsseEnvelope")
        elif forgery == "other-key":
            generate_keypair(signed / "other")
            os.replace(signed / "other.pub", signed / "attest.pub")
        else:
            digest = hashlib.sha256(b"another file").hexdigest()
        done = run_js(script, signed, "ci.aos.sigstore.json", "attest.pub", digest)
        assert 1 == done.returncode, done.stdout
        expected = "subject digest differs" if forgery == "other-digest" else "SIGNATURE_ERROR"
        assert expected in done.stderr

    def test_sigstore_python_reads_the_bundle_but_verifies_keyless_only(self, signed: Path) -> None:
        """sigstore-python's protobuf-specs model parses the bundle; its verifying Bundle wants a certificate."""
        from sigstore.errors import Error
        from sigstore.models import Bundle as VerifyingBundle
        from sigstore_models.bundle.v1 import Bundle

        text = (signed / "ci.aos.sigstore.json").read_text()
        parsed = Bundle.from_json(text)
        assert (BUNDLE_MEDIA_TYPE, load_signer(signed / "attest.key").key_id) == (
            parsed.media_type,
            parsed.verification_material.public_key.hint,
        )
        with pytest.raises(Error, match="expected certificate in bundle"):
            VerifyingBundle.from_json(text)

    def test_bundle_needs_a_key(self, tmp_path: Path) -> None:
        """--bundle without --key is a usage error (a bundle holds a signed envelope), and writes nothing."""
        s = gated(tmp_path / "s.aos")
        code, err = attest_cli(str(s), "-o", str(tmp_path / "e.json"), "--bundle", str(tmp_path / "b.json"))
        assert (2, False, False) == (code, (tmp_path / "e.json").exists(), (tmp_path / "b.json").exists())
        assert "--bundle needs --sign-key" in err  # the private key is --sign-key (one vocabulary)

    def test_unsigned_attestation_has_no_bundle(self, tmp_path: Path) -> None:
        """The library refuses to make a bundle of an unsigned attestation."""
        a = attest(gated(tmp_path / "s.aos"), identity=Identity(ATTESTER))
        with pytest.raises(ValueError, match="unsigned"):
            a.bundle()


# -- the subject's digests --------------------------------------------------------------------


class TestDigest:
    def test_digest_sha256_passes_sigstore_pythons_statement_model(self, tmp_path: Path) -> None:
        """By default the subject has only sha256, which sigstore-python's Statement accepts."""
        from sigstore.dsse import Statement

        s = gated(tmp_path / "s.aos")
        code, err = attest_cli(str(s), "-o", str(tmp_path / "e.json"))
        assert 0 == code, err
        payload = base64.b64decode(json.loads((tmp_path / "e.json").read_text())["payload"])
        Statement(payload)
        assert [{"name": "s.aos", "digest": {"sha256": sha256_of(s)}}] == json.loads(payload)["subject"]

    def test_digest_blake3_is_refused_by_sigstore_python(self, tmp_path: Path) -> None:
        """--digest blake3 adds blake3 beside sha256; sigstore-python's Statement refuses blake3."""
        from blake3 import blake3
        from sigstore.dsse import Statement
        from sigstore.errors import Error

        s = gated(tmp_path / "s.aos")
        assert 0 == attest_cli(str(s), "--digest", "blake3", "-o", str(tmp_path / "e.json"))[0]
        payload = base64.b64decode(json.loads((tmp_path / "e.json").read_text())["payload"])
        expected = {"sha256": sha256_of(s), "blake3": blake3(s.read_bytes()).hexdigest()}
        assert expected == json.loads(payload)["subject"][0]["digest"]
        with pytest.raises(Error, match="blake3"):
            Statement(payload)
        assert 2 == attest_cli(str(s), "--digest", "md5", "-o", str(tmp_path / "f.json"))[0]


# -- securesystemslib and in-toto --------------------------------------------------------------


class TestDsse:
    def test_securesystemslib_verifies_only_with_the_envelopes_keyid(self, signed: Path) -> None:
        """securesystemslib verifies with a key named by the envelope's keyid, and not with its own key id."""
        from securesystemslib.dsse import Envelope
        from securesystemslib.exceptions import VerificationError
        from securesystemslib.signer import SSlibKey

        public = load_signer(signed / "attest.key").private.public_key()
        env = json.loads((signed / "ci.aos.intoto.json").read_text())
        own = SSlibKey.from_crypto(public)
        assert own.keyid != env["signatures"][0]["keyid"]
        with pytest.raises(VerificationError):
            Envelope.from_dict(json.loads(json.dumps(env))).verify([own], 1)
        raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        named = SSlibKey(env["signatures"][0]["keyid"], "ed25519", "ed25519", {"public": raw.hex()})
        assert 1 == len(Envelope.from_dict(json.loads(json.dumps(env))).verify([named], 1))

    def test_in_toto_envelope_verifies_but_get_payload_refuses(self, signed: Path) -> None:
        """in-toto's Envelope (securesystemslib's) verifies; its get_payload refuses a Statement (links only)."""
        from in_toto.exceptions import InvalidMetadata
        from in_toto.models.metadata import Envelope
        from securesystemslib.signer import SSlibKey

        public = load_signer(signed / "attest.key").private.public_key()
        env = json.loads((signed / "ci.aos.intoto.json").read_text())
        raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        key = SSlibKey(env["signatures"][0]["keyid"], "ed25519", "ed25519", {"public": raw.hex()})
        e = Envelope.from_dict(json.loads(json.dumps(env)))
        assert 1 == len(e.verify([key], 1))
        with pytest.raises(InvalidMetadata):
            e.get_payload()


# -- the documented recipes, as written ---------------------------------------------------------


class TestRecipes:
    @pytest.mark.parametrize("index", [0, 1, 2])
    def test_python_recipes_run(self, signed: Path, index: int) -> None:
        """Each Python recipe in docs/CI.md runs as written on a real attestation."""
        done = run_py(blocks("python")[index], signed)
        assert 0 == done.returncode, done.stderr

    @pytest.mark.parametrize("index", [0, 1, 2])
    def test_python_recipes_fail_on_a_forged_payload(self, signed: Path, index: int) -> None:
        """Each Python recipe fails once the payload is edited (in the envelope and the bundle alike)."""
        forge_payload(signed / "ci.aos.intoto.json")
        forge_payload(signed / "ci.aos.sigstore.json", "dsseEnvelope")
        if index == 1:  # the sigstore-python recipe checks the digest: make the bundle name another file
            doc: dict[str, Any] = json.loads((signed / "ci.aos.sigstore.json").read_text())
            (signed / "ci.aos").write_bytes(b"another file")
            (signed / "ci.aos.sigstore.json").write_text(json.dumps(doc))
        done = run_py(blocks("python")[index], signed)
        assert 1 == done.returncode, done.stdout


# -- in-toto-attestation's VSA protobuf -------------------------------------------------------


class TestVsaProtobuf:
    """The predicate as in-toto-attestation's protobuf bindings read it (they lag the VSA v1.0 spec)."""

    def predicate(self, signed: Path) -> dict[str, Any]:
        envelope = json.loads((signed / "ci.aos.intoto.json").read_text())
        predicate: dict[str, Any] = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
        return predicate

    def test_strict_parse_refuses_only_the_spec_fields_it_lacks(self, signed: Path) -> None:
        """A strict parse refuses verifier.version, policy.name, the verifiedLevels array and our own
        details, and every other field parses as written."""
        from google.protobuf import json_format
        from in_toto_attestation.predicates.vsa.v1 import vsa_pb2

        predicate = self.predicate(signed)
        lagging: list[tuple[str, Callable[[dict[str, Any]], object]]] = [
            # in the order a parser meets them (the keys are sorted)
            ("name", lambda p: p["policy"].pop("name")),
            (DETAILS, lambda p: p.pop(DETAILS)),
            ("verifiedLevels", lambda p: p.pop("verifiedLevels")),
            ("version", lambda p: p["verifier"].pop("version")),
        ]
        for match, set_aside in lagging:
            with pytest.raises(json_format.ParseError, match=re.escape(match)):
                json_format.ParseDict(predicate, vsa_pb2.VerificationSummary())
            set_aside(predicate)
        vsa = json_format.ParseDict(predicate, vsa_pb2.VerificationSummary())
        # an empty list is the protobuf default, which MessageToDict leaves out
        assert {k: v for k, v in predicate.items() if v != []} == json_format.MessageToDict(vsa)

    def test_the_spec_fields_are_kept(self, signed: Path) -> None:
        """The predicate keeps the VSA v1.0 fields the bindings lack: conformance to the spec comes first."""
        predicate = self.predicate(signed)
        assert {"alpha-observe"} == set(predicate["verifier"]["version"])
        assert "exit-zero" == predicate["policy"]["name"]
        assert isinstance(predicate["verifiedLevels"], list)
