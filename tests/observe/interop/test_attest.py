"""``alpha observe attest``: a DSSE envelope of an in-toto Statement v1 carrying a SLSA VSA v1.

The envelope is checked with an independent DSSE implementation (securesystemslib's
``Envelope`` and its Ed25519 key, built from the public key's raw bytes), and the
Statement against JSON Schemas written from the in-toto and SLSA specs
(tests/assets/*.schema.json; the in-toto-attestation package's binding lags VSA v1).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from blake3 import blake3
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from aos.signing import Signer, load_signer
from gates.testing import SyntheticStream
from observe.env import AttestVars
from observe.interop.attest import PAYLOAD_TYPE, attest, level, pae
from observe.interop.identity import DETAILS, Identity
from tests.helpers.cli import invoke
from tests.helpers.paths import ASSETS, DOCS, ROOT
from tests.helpers.run import child_env

#: The attester id every test gives (a user's own URI; alpha-observe has none of its own).
ATTESTER = "https://ci.example/attester"
ID = Identity(ATTESTER)

EXIT_ZERO_TOML = ROOT / "gates" / "builtin" / "exit-zero.toml"

USER_GATE = """\
[gate]
name = "unit-lane"
description = "exits 0 and reports its unit tests"
scope = "unit"

[exit]
code = 0

[[receipt]]
name = "unit"
status = "pass"
"""


# -- helpers --------------------------------------------------------------------------------


def gated(
    path: Path, lane: SyntheticStream | None = None, gate: Any = "exit-zero", signer: Signer | None = None
) -> Path:
    """Write ``lane`` (default: a command that exited 0) sealed with the verdict ``gate`` really gives."""
    s = lane or _exited(0)
    v = s.evaluate(gate)
    s.add("verdict", v.to_attrs())
    s.write(path, signer=signer)
    return path


def _exited(code: int | None, *receipts: str) -> SyntheticStream:
    """A command that printed hello, sent ``receipts`` (status pass) and exited ``code`` (None: never exited)."""
    s = SyntheticStream(gate="exit-zero")
    s.output("stdout", b"hello\n")
    for name in receipts:
        s.receipt(name, "pass", passed=3)
    if code is not None:
        s.exit(code)
    return s


def keypair(tmp_path: Path, name: str) -> tuple[Path, Path, Signer]:
    """``name.key`` and ``name.pub`` written by ``alpha observe keygen``'s library function."""
    from aos.signing import generate_keypair

    key, pub = generate_keypair(tmp_path / name)
    return key, pub, load_signer(key)


def run(*args: str) -> tuple[int, str, str]:
    """``alpha observe attest ARGS...`` with the attester id in ``$ALPHA_ATTESTER_ID``, as a CI job sets it."""
    r = invoke("observe", "attest", *args, env={AttestVars.ATTESTER_ID: ATTESTER})
    return r.exit_code, r.stdout, r.stderr


def envelope_of(path: Path) -> dict[str, Any]:
    env: dict[str, Any] = json.loads(path.read_text())
    return env


def statement_of(env: dict[str, Any]) -> dict[str, Any]:
    st: dict[str, Any] = json.loads(base64.b64decode(env["payload"], validate=True))
    return st


def sslib_key(public: Ed25519PublicKey, keyid: str) -> Any:
    """securesystemslib's Ed25519 key from the raw public bytes (its own key type, not ours)."""
    from securesystemslib.signer import SSlibKey

    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return SSlibKey(keyid, "ed25519", "ed25519", {"public": raw.hex()})


def sslib_verify(env: dict[str, Any], public: Ed25519PublicKey, keyid: str) -> dict[str, Any]:
    """Verify ``env`` with securesystemslib's DSSE implementation; return the Statement it carries."""
    from securesystemslib.dsse import Envelope

    e = Envelope.from_dict(json.loads(json.dumps(env)))  # from_dict edits its input: give it a copy
    e.verify([sslib_key(public, keyid)], 1)
    assert PAYLOAD_TYPE == e.payload_type
    st: dict[str, Any] = json.loads(e.payload)
    return st


@pytest.fixture(scope="module")
def validators() -> tuple[Any, Any]:
    """(Statement validator, VSA validator) from tests/assets, resolving only each other (no network)."""
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    schemas = [
        json.loads((ASSETS / n).read_text()) for n in ("intoto-statement-v1.schema.json", "slsa-vsa-v1.schema.json")
    ]
    for s in schemas:
        Draft202012Validator.check_schema(s)
    registry: Registry[Any] = Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in schemas)
    return tuple(Draft202012Validator(s, registry=registry, format_checker=None) for s in schemas)


# -- the envelope ---------------------------------------------------------------------------


class TestEnvelope:
    def test_signed_envelope_verifies_independently(self, tmp_path: Path) -> None:
        """With --key, securesystemslib's DSSE verifier accepts the envelope under the project's key id."""
        key, _pub, signer = keypair(tmp_path, "attest")
        stream = gated(tmp_path / "s.aos")
        code, _, err = run(str(stream), "--key", str(key), "-o", str(tmp_path / "s.intoto.json"))
        assert 0 == code, err
        env = envelope_of(tmp_path / "s.intoto.json")
        assert {"payloadType", "payload", "signatures"} == set(env)
        assert [signer.key_id] == [s["keyid"] for s in env["signatures"]]
        st = sslib_verify(env, signer.private.public_key(), signer.key_id)
        assert statement_of(env) == st
        assert f"envelope: signed by key {signer.key_id}" in err

    def test_signature_is_over_the_dsse_pae(self, tmp_path: Path) -> None:
        """The signature is Ed25519 over PAE(type, body), byte for byte as the DSSE spec spells it."""
        key, _pub, signer = keypair(tmp_path, "attest")
        run(str(gated(tmp_path / "s.aos")), "--key", str(key), "-o", str(tmp_path / "e.json"))
        env = envelope_of(tmp_path / "e.json")
        body = base64.b64decode(env["payload"])
        t = PAYLOAD_TYPE.encode()
        spelled = b"DSSEv1 " + str(len(t)).encode() + b" " + t + b" " + str(len(body)).encode() + b" " + body
        assert spelled == pae(PAYLOAD_TYPE, body)
        from securesystemslib.dsse import Envelope

        assert spelled == Envelope(body, PAYLOAD_TYPE, {}).pae()
        signer.private.public_key().verify(base64.b64decode(env["signatures"][0]["sig"]), spelled)

    def test_edited_payload_fails_verification(self, tmp_path: Path) -> None:
        """A forger who turns FAILED into PASSED in the payload (signature kept) is caught by the DSSE verifier."""
        from securesystemslib.exceptions import VerificationError

        key, _pub, signer = keypair(tmp_path, "attest")
        run(str(gated(tmp_path / "s.aos", _exited(1))), "--key", str(key), "-o", str(tmp_path / "e.json"))
        env = envelope_of(tmp_path / "e.json")
        st = statement_of(env)
        assert "FAILED" == st["predicate"]["verificationResult"]
        st["predicate"]["verificationResult"] = "PASSED"
        st["predicate"]["verifiedLevels"] = [level("command")]
        forged = {**env, "payload": base64.b64encode(json.dumps(st).encode()).decode()}
        sslib_verify(env, signer.private.public_key(), signer.key_id)  # the original verifies
        with pytest.raises(VerificationError):
            sslib_verify(forged, signer.private.public_key(), signer.key_id)

    def test_other_key_fails_verification(self, tmp_path: Path) -> None:
        """An envelope signed by one key does not verify under another key given the same key id."""
        from securesystemslib.exceptions import VerificationError

        key, _pub, signer = keypair(tmp_path, "attest")
        other = Ed25519PrivateKey.generate()
        run(str(gated(tmp_path / "s.aos")), "--key", str(key), "-o", str(tmp_path / "e.json"))
        with pytest.raises(VerificationError):
            sslib_verify(envelope_of(tmp_path / "e.json"), other.public_key(), signer.key_id)

    def test_unsigned(self, tmp_path: Path) -> None:
        """Without --key the signatures list is empty, stderr says so, and no verifier accepts it."""
        from securesystemslib.exceptions import VerificationError

        code, _, err = run(str(gated(tmp_path / "s.aos")), "-o", str(tmp_path / "e.json"))
        assert 0 == code
        env = envelope_of(tmp_path / "e.json")
        assert [] == env["signatures"]
        assert "the statement is unsigned" in err
        with pytest.raises(VerificationError):
            sslib_verify(env, Ed25519PrivateKey.generate().public_key(), "x")

    def test_stdout(self, tmp_path: Path) -> None:
        """-o - writes the envelope, alone, on stdout."""
        code, out, _ = run(str(gated(tmp_path / "s.aos")), "-o", "-")
        assert 0 == code
        assert "https://in-toto.io/Statement/v1" == statement_of(json.loads(out))["_type"]

    def test_missing_folders_are_created(self, tmp_path: Path) -> None:
        """The output's missing folders are created."""
        out = tmp_path / "a" / "b" / "e.json"
        assert 0 == run(str(gated(tmp_path / "s.aos")), "-o", str(out))[0]
        assert out.is_file()

    def test_unwritable_output_is_refused(self, tmp_path: Path) -> None:
        """An output that cannot be written is refused by name (output-write), exit 1."""
        blocker = tmp_path / "file"
        blocker.write_text("")
        code, _, err = run(str(gated(tmp_path / "s.aos")), "-o", str(blocker / "e.json"))
        assert 1 == code
        assert err.startswith("refused: output-write: ")


# -- the statement --------------------------------------------------------------------------


class TestStatement:
    def test_validates_against_the_specs(self, tmp_path: Path, validators: tuple[Any, Any]) -> None:
        """The Statement is a valid in-toto Statement v1 and SLSA VSA v1 (schemas from the specs)."""
        run(str(gated(tmp_path / "s.aos")), "-o", str(tmp_path / "e.json"))
        st = statement_of(envelope_of(tmp_path / "e.json"))
        for v in validators:
            v.validate(st)
        assert {"_type", "subject", "predicateType", "predicate"} == set(st)

    def test_subject_is_the_stream_file(self, tmp_path: Path) -> None:
        """The subject is the stream file: its name and the SHA-256 of its exact bytes; --digest blake3 adds BLAKE3."""
        stream = gated(tmp_path / "lane.aos")
        run(str(stream), "-o", str(tmp_path / "e.json"))
        run(str(stream), "--digest", "blake3", "-o", str(tmp_path / "b.json"))
        data = stream.read_bytes()
        sha256 = {"sha256": hashlib.sha256(data).hexdigest()}
        assert [{"name": "lane.aos", "digest": sha256}] == statement_of(envelope_of(tmp_path / "e.json"))["subject"]
        both = {**sha256, "blake3": blake3(data).hexdigest()}
        assert [{"name": "lane.aos", "digest": both}] == statement_of(envelope_of(tmp_path / "b.json"))["subject"]

    def test_predicate(self, tmp_path: Path) -> None:
        """verifier (the user's id), policy (the gate's name, URN and the SHA-256 of its definition), the stream's
        URN, result, level, scope; nothing names a package or a local path."""
        from importlib.metadata import version

        stream = gated(tmp_path / "s.aos")
        before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        run(str(stream), "-o", str(tmp_path / "e.json"))
        p = statement_of(envelope_of(tmp_path / "e.json"))["predicate"]
        assert {"id": ATTESTER, "version": {"alpha-observe": version("alpha-observe")}} == p["verifier"]
        assert {
            "name": "exit-zero",
            "uri": "urn:alpha-observe:gate:exit-zero",
            "digest": {"sha256": hashlib.sha256(EXIT_ZERO_TOML.read_bytes()).hexdigest()},
        } == p["policy"]
        assert f"urn:alpha-observe:stream:{p[DETAILS]['stream_id']}" == p["resourceUri"]
        text = base64.b64decode(envelope_of(tmp_path / "e.json")["payload"]).decode()
        assert [] == [t for t in ("pkg:", "file:", str(tmp_path)) if t in text]
        assert ("PASSED", ["ALPHA_OBSERVE_SCOPE_COMMAND"], []) == (
            p["verificationResult"],
            p["verifiedLevels"],
            p["inputAttestations"],
        )
        when = datetime.datetime.strptime(p["timeVerified"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
        assert before <= when <= datetime.datetime.now(datetime.UTC)
        ext = p[DETAILS]
        assert ("exit-zero", "pass", "command", [{"name": "exit-code", "status": "pass"}]) == (
            ext["gate"],
            ext["verdict"],
            ext["scope"],
            ext["checks"],
        )
        assert {"signed": False, "signature_checked": False, "key_id": None} == {
            k: ext["seal"][k] for k in ("signed", "signature_checked", "key_id")
        }

    @pytest.mark.parametrize(("code", "verdict"), [(0, "pass"), (1, "fail"), (None, "inconclusive")])
    def test_result(self, tmp_path: Path, validators: tuple[Any, Any], code: int | None, verdict: str) -> None:
        """pass is PASSED with the scope's level; fail and inconclusive are FAILED with level FAILED."""
        run(str(gated(tmp_path / "s.aos", _exited(code))), "-o", str(tmp_path / "e.json"))
        st = statement_of(envelope_of(tmp_path / "e.json"))
        p = st["predicate"]
        expected = ("PASSED", ["ALPHA_OBSERVE_SCOPE_COMMAND"]) if verdict == "pass" else ("FAILED", ["FAILED"])
        assert expected == (p["verificationResult"], p["verifiedLevels"])
        assert verdict == p[DETAILS]["verdict"]
        for v in validators:
            v.validate(st)

    def test_resource_uri(self, tmp_path: Path) -> None:
        """--resource-uri names the stream where it is stored (a store URL); a non-URI is a usage error."""
        stream = gated(tmp_path / "s.aos")
        url = "s3://evidence/aos/0123.aos"
        run(str(stream), "--resource-uri", url, "-o", str(tmp_path / "e.json"))
        assert url == statement_of(envelope_of(tmp_path / "e.json"))["predicate"]["resourceUri"]
        assert 2 == run(str(stream), "--resource-uri", "not a uri", "-o", str(tmp_path / "f.json"))[0]

    def test_policy_uri_and_attester_from_flags_or_environment(self, tmp_path: Path) -> None:
        """--policy-uri (or $ALPHA_ATTEST_POLICY_URI) is policy.uri and --attester-id overrides the environment's."""
        stream = gated(tmp_path / "s.aos")
        uri = "https://example.com/policies/exit-zero"
        r = invoke("observe", "attest", str(stream), "--attester-id", "urn:mine:attester",
                   "-o", str(tmp_path / "a.json"),
                   env={AttestVars.ATTESTER_ID: ATTESTER, AttestVars.POLICY_URI: uri})  # fmt: skip
        assert 0 == r.exit_code, r.stderr
        p = statement_of(envelope_of(tmp_path / "a.json"))["predicate"]
        assert ("urn:mine:attester", uri) == (p["verifier"]["id"], p["policy"]["uri"])
        assert 2 == run(str(stream), "--policy-uri", "not a uri", "-o", str(tmp_path / "b.json"))[0]

    @pytest.mark.parametrize(
        "args",
        [
            ["--subjects-out", "s.sha256"],
            ["--subject", "dist/*"],
            ["--provenance", "--subjects-out", "same.json", "-o", "same.json"],
            ["--provenance", "--test-result"],
        ],
        ids=["subjects-out-without-provenance", "subject-without-provenance", "same-file", "both-statements"],
    )
    def test_usage_errors(self, tmp_path: Path, args: list[str]) -> None:
        """--subject and --subjects-out need --provenance or --test-result; two outputs may not name one file;
        one statement per command."""
        stream = gated(tmp_path / "s.aos")
        args = [str(tmp_path / a) if a.endswith((".json", ".sha256")) else a for a in args]
        out = [] if "-o" in args else ["-o", str(tmp_path / "e.json")]
        code, _, err = run(str(stream), *args, *out)
        assert (2, ["s.aos"]) == (code, sorted(p.name for p in tmp_path.iterdir())), err

    def test_level_names(self) -> None:
        """Levels are ALPHA_OBSERVE_SCOPE_ and the scope, upper-cased, other characters as _ (never SLSA_)."""
        assert ["ALPHA_OBSERVE_SCOPE_PHYSICAL", "ALPHA_OBSERVE_SCOPE_UNIT_TESTS", "ALPHA_OBSERVE_SCOPE_SLSA__"] == [
            level("physical"),
            level("unit-tests"),
            level("slsa_é"),
        ]

    def test_deterministic_but_for_the_time(self, tmp_path: Path) -> None:
        """Two attestations of one stream at one time are byte-identical (Ed25519 is deterministic)."""
        _key, _pub, signer = keypair(tmp_path, "k")
        stream = gated(tmp_path / "s.aos")
        now = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
        a, b = (attest(stream, identity=ID, signer=signer, now=now).envelope_bytes() for _ in range(2))
        assert a == b
        assert "2030-01-02T03:04:05Z" == statement_of(json.loads(a))["predicate"]["timeVerified"]


class TestSchemas:
    """The schemas are not vacuous: statements that break the specs fail them."""

    @pytest.mark.parametrize(
        ("what", "edit"),
        [
            ("wrong _type", lambda st: st.update({"_type": "https://in-toto.io/Statement/v0.1"})),
            ("subject without digest", lambda st: st["subject"][0].pop("digest")),
            ("sha256 not hex", lambda st: st["subject"][0]["digest"].update({"sha256": "ABC"})),
            ("no subject", lambda st: st.update({"subject": []})),
            ("result not PASSED/FAILED", lambda st: st["predicate"].update({"verificationResult": "OK"})),
            ("custom level starting SLSA_", lambda st: st["predicate"].update({"verifiedLevels": ["SLSA_SCOPE"]})),
            ("FAILED level on a pass", lambda st: st["predicate"].update({"verifiedLevels": ["FAILED"]})),
            ("policy without uri", lambda st: st["predicate"]["policy"].pop("uri")),
            ("time not UTC", lambda st: st["predicate"].update({"timeVerified": "2030-01-01T00:00:00+01:00"})),
            ("extension not named by a URI", lambda st: st["predicate"].update({"scope": "x"})),
            ("no verifier id", lambda st: st["predicate"]["verifier"].pop("id")),
            ("resourceUri a bare path", lambda st: st["predicate"].update({"resourceUri": "/tmp/s.aos"})),
        ],
    )
    def test_bad_statements_fail(self, tmp_path: Path, validators: tuple[Any, Any], what: str, edit: Any) -> None:
        """A Statement edited against the spec fails one of the schemas."""
        run(str(gated(tmp_path / "s.aos")), "-o", str(tmp_path / "e.json"))
        st = statement_of(envelope_of(tmp_path / "e.json"))
        assert all(v.is_valid(st) for v in validators)
        edit(st)
        assert not all(v.is_valid(st) for v in validators), what


# -- refusals: what is not attested ----------------------------------------------------------


def _refused(args: list[str], out: Path) -> tuple[str, str]:
    code, _, err = run(*args, "-o", str(out))
    assert 1 == code, err
    assert not out.exists()
    name = err.split(":")[1].strip() if err.startswith("refused: ") else err
    return name, err


class TestRefusals:
    def test_tampered_stream(self, tmp_path: Path) -> None:
        """A stream with a flipped byte is refused by verify's name and nothing is written."""
        from tracker.testing import flip_byte

        stream = gated(tmp_path / "s.aos")
        flip_byte(stream)
        name, _ = _refused([str(stream)], tmp_path / "e.json")
        assert name in {"stream-chain", "stream-seal", "stream-schema", "stream-truncated"}

    @pytest.mark.parametrize(
        ("asset", "name"), [("flipped-byte.aos", "stream-chain"), ("unsealed.aos", "stream-unsealed")]
    )
    def test_known_bad_assets(self, tmp_path: Path, asset: str, name: str, asset_manifest: dict[str, Any]) -> None:
        """The named known-bad assets are refused with the refusal verify gives them."""
        if asset not in asset_manifest:
            pytest.skip(f"no asset {asset}")
        assert name == asset_manifest[asset]["refusal"]
        assert name == _refused([str(ASSETS / asset)], tmp_path / "e.json")[0]

    def test_no_verdict(self, tmp_path: Path) -> None:
        """A recording without a gate has no verdict to attest: stream-verdict."""
        s = _exited(0)
        s.write(tmp_path / "s.aos")
        assert "stream-verdict" == _refused([str(tmp_path / "s.aos")], tmp_path / "e.json")[0]

    def test_missing_stream(self, tmp_path: Path) -> None:
        """A path that is not a stream file is stream-missing."""
        assert "stream-missing" == _refused([str(tmp_path / "nope.aos")], tmp_path / "e.json")[0]
        assert "stream-missing" == _refused([str(tmp_path)], tmp_path / "e.json")[0]

    def test_forged_verdict_rechained(self, tmp_path: Path, surgery: ModuleType) -> None:
        """A fail verdict edited to pass, chain and seal recomputed (verify accepts it), is refused: stream-verdict."""
        from aos.canonical import canonical_json
        from aos.verify import verify_stream

        stream = gated(tmp_path / "s.aos", _exited(3))

        def to_pass(batches: list[list[dict[str, Any]]]) -> None:
            for rows in batches:
                for r in rows:
                    if r["kind"] == "verdict":
                        a = json.loads(r["attrs"])
                        a["verdict"] = "pass"
                        for c in a["checks"]:
                            c["status"] = "pass"
                        r["attrs"] = canonical_json(a)

        forged = tmp_path / "forged.aos"
        forged.write_bytes(surgery._resealed_with(surgery.split(stream), to_pass).join())
        assert "pass" == verify_stream(forged).verdict["verdict"]  # type: ignore[index]
        name, err = _refused([str(forged)], tmp_path / "e.json")
        assert "stream-verdict" == name
        assert "is not what gate exit-zero gives" in err
        assert "(recorded by alpha-observe test, this is " in err  # the synthetic stream's recorded version

    def test_forged_scope_rechained(self, tmp_path: Path, surgery: ModuleType) -> None:
        """A pass whose scope is edited upwards (and re-chained) is refused: the fresh scope differs."""
        from aos.canonical import canonical_json

        stream = gated(tmp_path / "s.aos")

        def widen(batches: list[list[dict[str, Any]]]) -> None:
            for rows in batches:
                for r in rows:
                    if r["kind"] == "verdict":
                        r["attrs"] = canonical_json({**json.loads(r["attrs"]), "scope": "physical"})

        forged = tmp_path / "forged.aos"
        forged.write_bytes(surgery._resealed_with(surgery.split(stream), widen).join())
        assert "stream-verdict" == _refused([str(forged)], tmp_path / "e.json")[0]

    def test_verdict_of_another_gate_definition(self, tmp_path: Path) -> None:
        """A verdict sealed under a gate digest this tool does not hold is attest-policy (the policy is unknown)."""
        s = _exited(0)
        v = s.evaluate("exit-zero")
        s.add("verdict", {**v.to_attrs(), "gate_sha256": "0" * 64})
        s.write(tmp_path / "s.aos")
        name, err = _refused([str(tmp_path / "s.aos")], tmp_path / "e.json")
        assert "attest-policy" == name
        assert "--gate-file" in err


class TestUserGates:
    def test_needs_the_gate_file(self, tmp_path: Path) -> None:
        """A user gate's verdict is attested only with its definition; the policy URI names the gate, not its path."""
        from gates.language import load_gate

        gate_file = tmp_path / "unit.toml"
        gate_file.write_text(USER_GATE)
        gate = load_gate(gate_file)
        lane = _exited(0, "unit")
        stream = gated(tmp_path / "s.aos", lane, gate)
        assert "attest-policy" == _refused([str(stream)], tmp_path / "e.json")[0]
        code, _, err = run(str(stream), "--gate-file", str(gate_file), "-o", str(tmp_path / "e.json"))
        assert 0 == code, err
        p = statement_of(envelope_of(tmp_path / "e.json"))["predicate"]
        assert {
            "name": "unit-lane",
            "uri": "urn:alpha-observe:gate:unit-lane",
            "digest": {"sha256": hashlib.sha256(gate_file.read_bytes()).hexdigest()},
        } == p["policy"]
        assert ["ALPHA_OBSERVE_SCOPE_UNIT"] == p["verifiedLevels"]

    def test_edited_gate_file_is_another_policy(self, tmp_path: Path) -> None:
        """A gate file edited since the verdict was sealed has another digest: attest-policy."""
        from gates.language import load_gate

        gate_file = tmp_path / "unit.toml"
        gate_file.write_text(USER_GATE)
        lane = _exited(0, "unit")
        stream = gated(tmp_path / "s.aos", lane, load_gate(gate_file))
        gate_file.write_text(USER_GATE.replace('status = "pass"', 'status = "info"'))
        assert "attest-policy" == _refused([str(stream), "--gate-file", str(gate_file)], tmp_path / "e.json")[0]


# -- which key signed what -------------------------------------------------------------------


class TestKeys:
    def test_seal_signed_by_the_attest_key_is_checked(self, tmp_path: Path) -> None:
        """A seal signed by the envelope's own key is checked against it, and says so."""
        key, _pub, signer = keypair(tmp_path, "k")
        stream = gated(tmp_path / "s.aos", signer=signer)
        code, _, err = run(str(stream), "--key", str(key), "-o", str(tmp_path / "e.json"))
        assert 0 == code, err
        assert f"seal: signed by key {signer.key_id}, signature checked" in err
        seal = statement_of(envelope_of(tmp_path / "e.json"))["predicate"][DETAILS]["seal"]
        assert (True, signer.key_id, True) == (seal["signed"], seal["key_id"], seal["signature_checked"])

    def test_seal_forged_under_the_attest_keys_id(self, tmp_path: Path, surgery: ModuleType) -> None:
        """A forger reseals with another key but names the attest key's id: refused (stream-signature)."""
        key, _pub, signer = keypair(tmp_path, "k")
        forger = Signer(Ed25519PrivateKey.generate())
        stream = gated(tmp_path / "s.aos", signer=signer)
        forged = tmp_path / "forged.aos"
        forged.write_bytes(surgery.reseal(surgery.split(stream), forger, key_id=signer.key_id).join())
        assert "stream-signature" == _refused([str(forged), "--key", str(key)], tmp_path / "e.json")[0]

    def test_seal_of_another_key_is_reported_unchecked(self, tmp_path: Path) -> None:
        """A seal signed by a key that was not given is attested, saying its signature was not checked."""
        key, _pub, _signer = keypair(tmp_path, "attest")
        _k, _p, recorder = keypair(tmp_path, "recorder")
        stream = gated(tmp_path / "s.aos", signer=recorder)
        code, _, err = run(str(stream), "--key", str(key), "-o", str(tmp_path / "e.json"))
        assert 0 == code, err
        assert f"seal: names key {recorder.key_id}; its signature was NOT checked" in err
        seal = statement_of(envelope_of(tmp_path / "e.json"))["predicate"][DETAILS]["seal"]
        assert (True, recorder.key_id, False) == (seal["signed"], seal["key_id"], seal["signature_checked"])

    def test_seal_key_required(self, tmp_path: Path) -> None:
        """--seal-key requires the seal signed by that key: another key's or an unsigned seal is refused."""
        _k, pub, recorder = keypair(tmp_path, "recorder")
        _k2, other_pub, _other = keypair(tmp_path, "other")
        stream = gated(tmp_path / "s.aos", signer=recorder)
        code, _, err = run(str(stream), "--seal-key", str(pub), "-o", str(tmp_path / "ok.json"))
        assert 0 == code, err
        assert f"seal: signed by key {recorder.key_id}, signature checked" in err
        assert "stream-signature" == _refused([str(stream), "--seal-key", str(other_pub)], tmp_path / "e.json")[0]
        unsigned = gated(tmp_path / "u.aos")
        assert "stream-signature" == _refused([str(unsigned), "--seal-key", str(pub)], tmp_path / "f.json")[0]

    def test_bad_key_file(self, tmp_path: Path) -> None:
        """A --key that is not an Ed25519 private key is refused (stream-signature), nothing written."""
        _k, pub, _s = keypair(tmp_path, "k")
        assert (
            "stream-signature" == _refused([str(gated(tmp_path / "s.aos")), "--key", str(pub)], tmp_path / "e.json")[0]
        )


class TestReadOnce:
    def test_verified_bytes_are_the_given_bytes(self, tmp_path: Path) -> None:
        """verify_stream(data=...) verifies the bytes in hand, not whatever the path holds now."""
        from aos.refusals import Refusal
        from aos.verify import verify_stream

        good = gated(tmp_path / "good.aos")
        data = good.read_bytes()
        bad = bytearray(data)
        bad[len(bad) // 2] ^= 0xFF
        assert blake3(data).hexdigest() == verify_stream(good, data=data).file_blake3
        with pytest.raises(Refusal):
            verify_stream(good, data=bytes(bad))
        good.write_bytes(bytes(bad))
        assert blake3(data).hexdigest() == verify_stream(good, data=data).file_blake3

    def test_attest_reads_the_file_once(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """attest reads the stream file once, also when it re-verifies the seal with the attester's key."""
        import observe.interop.verified

        _key, _pub, signer = keypair(tmp_path, "k")
        stream = gated(tmp_path / "s.aos", signer=signer)
        reads: list[Path] = []
        real = observe.interop.verified._read_once

        def counting(path: Path) -> bytes:
            reads.append(path)
            return real(path)

        monkeypatch.setattr(observe.interop.verified, "_read_once", counting)
        a = attest(stream, identity=ID, signer=signer)
        assert [stream] == reads
        assert a.statement["predicate"][DETAILS]["seal"]["signature_checked"]


class TestDocs:
    def test_ci_md_attesting_block_runs(self, tmp_path: Path) -> None:
        """docs/CI.md's "Attesting" example runs as written and leaves a signed, verifiable envelope and exports."""
        import re
        import subprocess

        text = (DOCS / "CI.md").read_text(encoding="utf-8")
        section = text[text.index("## Attesting") :]
        block = re.findall(r"```sh\n(.*?)```", section, flags=re.S)[0]
        env = child_env()
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert 0 == done.returncode, done.stdout + done.stderr
        signer = load_signer(tmp_path / "attest.key")
        st = sslib_verify(envelope_of(tmp_path / "ci.aos.intoto.json"), signer.private.public_key(), signer.key_id)
        assert "PASSED" == st["predicate"]["verificationResult"]
        assert "resourceSpans" in json.loads((tmp_path / "ci.otlp.json").read_text())
        assert 2 == json.loads((tmp_path / "ci.cast").read_text().splitlines()[0])["version"]
