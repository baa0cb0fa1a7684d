"""``attest --provenance`` and ``--test-result``, as their consumers see them.

A real build is recorded by the block of docs/CI.md ("Provenance and test
results"), run as written in a git repository; its provenance is read by
in-toto-attestation's protobufs (strictly), verified by securesystemslib (the
documented recipe), by @sigstore/verify (tests/js; skipped with a reason when
node or its modules are absent) and by slsa-verifier's checks replicated from its
source. Each forgery (an artifact edited after it was recorded, a capture whose
bytes are not its digest, a file a receipt only names) must fail them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gates.testing import SyntheticStream
from observe.interop.identity import Identity
from observe.interop.provenance import attest_provenance, sha256sum_lines
from tests.helpers.cli import invoke
from tests.helpers.paths import ROOT
from tests.helpers.run import child_env
from tests.observe.interop.test_attest_consumers import blocks as vsa_blocks
from tests.observe.interop.test_attest_consumers import run_js

#: The attester id of docs/CI.md's block.
BUILDER = "https://github.com/OWNER/REPO/.github/workflows/release.yml"
REMOTE = "https://github.com/OWNER/REPO.git"


def section_blocks(lang: str) -> list[str]:
    """The ``lang`` code blocks of docs/CI.md's "Provenance and test results"."""
    text = (ROOT / "docs" / "CI.md").read_text(encoding="utf-8")
    section = text[text.index("## Provenance and test results") :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(rf"```{lang}\n(.*?)```", section, flags=re.S)


def git(d: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=d,
        capture_output=True,
        text=True,
        check=True,
        env=child_env(),
    )
    return done.stdout.strip()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository (a commit, an https origin) in which docs/CI.md's block ran as written."""
    d = tmp_path_factory.mktemp("build")
    git(d, "init", "-q")
    (d / ".gitignore").write_text("*\n")  # what the build writes leaves the tree clean
    git(d, "add", "-f", ".gitignore")
    git(d, "commit", "-q", "-m", "source")
    git(d, "remote", "add", "origin", REMOTE)
    (block,) = section_blocks("sh")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=d,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert 0 == done.returncode, done.stdout + done.stderr
    return d


def statement(path: Path) -> dict[str, Any]:
    env = json.loads(path.read_text())
    st: dict[str, Any] = json.loads(base64.b64decode(env["payload"]))
    return st


def copy(built: Path, tmp_path: Path) -> Path:
    """A copy of the build folder (with its .git), for a test that edits it."""
    d = tmp_path / "b"
    shutil.copytree(built, d, symlinks=True)
    return d


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def slsa_verifier_checks(st: dict[str, Any], artifact_sha256: str, builder_id: str, source_uri: str) -> None:
    """slsa-verifier's checks of a provenance v1, replicated from its source where it cannot run here.

    From slsa-framework/slsa-verifier ``verifiers/internal/gha/provenance.go``:
    ``verifyDigest`` (the expected hash's length names the algorithm, ``sha256``
    for 64 hex digits; some subject's digest under it equals it, else
    ``ErrorMismatchHash``), ``verifyBuilderIDExactMatch`` (``runDetails.builder.id``
    equals the expected id) and the material half of ``verifySourceURI`` (the
    first resolved dependency's ``git+`` URI, split at ``@``, is the expected
    repository and carries a ref); and from its ``slsaprovenance`` package, the
    Statement and predicate types of a v1 provenance.
    """
    if st.get("_type") != "https://in-toto.io/Statement/v1" or st.get("predicateType") != (
        "https://slsa.dev/provenance/v1"
    ):
        raise AssertionError("ErrorInvalidDssePayload: not a SLSA v1 provenance statement")
    algo = f"sha{len(artifact_sha256) * 4}"
    if not any(s.get("digest", {}).get(algo) == artifact_sha256 for s in st["subject"]):
        raise AssertionError(f"ErrorMismatchHash: expected hash {artifact_sha256!r} not found")
    if st["predicate"]["runDetails"]["builder"]["id"] != builder_id:
        raise AssertionError("ErrorInvalidBuilderID")
    uri = st["predicate"]["buildDefinition"]["resolvedDependencies"][0].get("uri", "")
    repo, _, ref = uri.partition("@")
    if repo != "git+" + source_uri.removesuffix(".git") + ".git" or not ref:
        raise AssertionError(f"ErrorMismatchSource: {uri!r}")


def gh_attestation_checks(bundle_path: Path, artifact_sha256: str, predicate_type: str) -> None:
    """``gh attestation verify --bundle``'s checks that do not need a Fulcio certificate, replicated from its
    source where it cannot run here.

    From cli/cli ``pkg/cmd/attestation/verification``: ``GetLocalAttestations``
    loads a ``.json`` bundle (sigstore-go's ``bundle.LoadJSONFromPath``, which wants
    a known bundle media type); ``EnforcementCriteria`` requires the predicate type
    (``--predicate-type``, default ``https://slsa.dev/provenance/v1``); and
    ``BuildDigestPolicyOption`` hands the artifact's digest to sigstore-go, which
    accepts the statement only when a subject's digest under that algorithm is it.
    Its other criteria (the certificate's SAN, issuer, source repository owner and
    runner environment) name a Fulcio certificate, which a key-signed bundle has
    not: there ``gh`` refuses every bundle of ours, which is why this replica stops here.
    """
    if bundle_path.suffix != ".json":
        raise AssertionError("ErrLocalAttestations")
    bundle = json.loads(bundle_path.read_text())
    if bundle.get("mediaType") != "application/vnd.dev.sigstore.bundle.v0.3+json":
        raise AssertionError("bundle could not be loaded from JSON file")
    st = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    if st.get("predicateType") != predicate_type:
        raise AssertionError(f"predicate type {st.get('predicateType')!r} is not {predicate_type!r}")
    if not any(s.get("digest", {}).get("sha256") == artifact_sha256 for s in st.get("subject", [])):
        raise AssertionError("provided artifact digest does not match any digest in statement")


# -- the documented build --------------------------------------------------------------------


class TestBuild:
    def test_subjects_commit_and_run(self, built: Path) -> None:
        """The provenance lists the captured file with its sha256, the commit the recorder read, the builder
        the user named, the stream's id as invocation and the stream as byproduct."""
        from observe.interop.verified import load_verified

        st = statement(built / "build.intoto.json")
        assert [{"name": "dist/hello.txt", "digest": {"sha256": sha256_of(built / "dist" / "hello.txt")}}] == st[
            "subject"
        ]
        definition, run = st["predicate"]["buildDefinition"], st["predicate"]["runDetails"]
        source = definition["resolvedDependencies"][0]
        assert (
            "source",
            git(built, "rev-parse", "HEAD"),
            f"git+{REMOTE}@refs/heads/{git(built, 'branch', '--show-current')}",
        ) == (
            source["name"],
            source["digest"]["gitCommit"],
            source["uri"],
        )
        assert False is source["annotations"]["dirty"]
        assert "urn:alpha-observe:build-type:recorded-command:v1" == definition["buildType"]
        assert ["sh", "-c", "mkdir -p dist && echo hello > dist/hello.txt"] == definition["externalParameters"]["argv"]
        assert "exit-zero" == definition["externalParameters"]["gate"]["name"]
        assert "PATH" in definition["internalParameters"]["environment"]["recorded"]
        stream = load_verified(built / "build.aos")
        assert BUILDER == run["builder"]["id"]
        assert stream.stream_id == run["metadata"]["invocationId"]
        assert run["metadata"]["startedOn"] <= run["metadata"]["finishedOn"]
        assert [{"name": "build.aos", "digest": {"sha256": sha256_of(built / "build.aos")}}] == [
            {k: b[k] for k in ("name", "digest")} for b in run["byproducts"]
        ]

    def test_no_local_path_and_no_name_not_owned(self, built: Path) -> None:
        """No attestation written carries the build folder's absolute path, a file:// URI or a package URL."""
        for name in ("build.intoto.json", "tests.intoto.json"):
            text = base64.b64decode(json.loads((built / name).read_text())["payload"]).decode()
            assert [] == [t for t in (str(built), "file:", "pkg:", "/tmp/") if t in text], name

    def test_subjects_out_is_sha256sum_format(self, built: Path) -> None:
        """--subjects-out holds HEX  NAME lines that sha256sum --check accepts, and refuses once the file changes."""
        digest = sha256_of(built / "dist" / "hello.txt")
        assert f"{digest}  dist/hello.txt\n" == (built / "dist.sha256").read_text()

    def test_in_toto_protobufs_parse_strictly(self, built: Path) -> None:
        """in-toto-attestation's Statement validates and its Provenance protobuf parses the predicate strictly."""
        from google.protobuf import json_format
        from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
        from in_toto_attestation.v1.statement import Statement
        from in_toto_attestation.v1.statement_pb2 import Statement as StatementPb

        st = statement(built / "build.intoto.json")
        Statement.copy_from_pb(json_format.ParseDict(st, StatementPb())).validate()
        prov = json_format.ParseDict(st["predicate"], provenance_pb2.Provenance())  # no unknown field ignored
        assert BUILDER == prov.run_details.builder.id
        assert (
            st["subject"][0]["digest"]["sha256"] == json_format.ParseDict(st, StatementPb()).subject[0].digest["sha256"]
        )

    def test_python_recipe_runs(self, built: Path) -> None:
        """docs/CI.md's provenance recipe (securesystemslib, slsa-verifier's checks) passes as written."""
        import sys

        (recipe,) = section_blocks("python")
        done = subprocess.run(
            [sys.executable, "-c", recipe], cwd=built, capture_output=True, text=True, check=False, env=child_env()
        )
        assert 0 == done.returncode, done.stderr

    def test_slsa_verifier_checks_pass(self, built: Path) -> None:
        """slsa-verifier's subject, builder and source checks (replicated) accept the provenance."""
        slsa_verifier_checks(
            statement(built / "build.intoto.json"), sha256_of(built / "dist" / "hello.txt"), BUILDER, REMOTE
        )

    def test_gh_attestation_checks_pass(self, built: Path) -> None:
        """gh attestation verify's bundle, predicate-type and digest checks (replicated) accept the provenance
        under the default predicate type, and refuse it under another (--predicate-type test-result)."""
        digest = sha256_of(built / "dist" / "hello.txt")
        gh_attestation_checks(built / "build.sigstore.json", digest, "https://slsa.dev/provenance/v1")
        with pytest.raises(AssertionError, match="predicate type"):
            gh_attestation_checks(
                built / "build.sigstore.json", digest, "https://in-toto.io/attestation/test-result/v0.1"
            )

    def test_sigstore_js_verifies_the_provenance_bundle(self, built: Path, tmp_path: Path) -> None:
        """@sigstore/verify verifies the provenance's bundle given attest.pub and the artifact's digest."""
        (script,) = vsa_blocks("js")
        d = copy(built, tmp_path)
        done = run_js(script, d, "build.sigstore.json", "attest.pub", sha256_of(d / "dist" / "hello.txt"))
        assert 0 == done.returncode, done.stderr


class TestForgeries:
    def test_an_artifact_edited_after_recording_is_refused_by_each(self, built: Path, tmp_path: Path) -> None:
        """A file edited after it was recorded no longer matches its subject: sha256sum, the recipe,
        slsa-verifier's checks and @sigstore/verify all refuse it."""
        import sys

        d = copy(built, tmp_path)
        (d / "dist" / "hello.txt").write_text("hello, edited\n")
        digest = sha256_of(d / "dist" / "hello.txt")
        check = subprocess.run(["sha256sum", "--check", "dist.sha256"], cwd=d, capture_output=True, check=False)
        assert 0 != check.returncode
        (recipe,) = section_blocks("python")
        done = subprocess.run([sys.executable, "-c", recipe], cwd=d, capture_output=True, text=True, check=False)
        assert (1, True) == (done.returncode, "subject digest differs" in done.stderr), done.stderr
        with pytest.raises(AssertionError, match="ErrorMismatchHash"):
            slsa_verifier_checks(statement(d / "build.intoto.json"), digest, BUILDER, REMOTE)
        with pytest.raises(AssertionError, match="does not match any digest"):
            gh_attestation_checks(d / "build.sigstore.json", digest, "https://slsa.dev/provenance/v1")
        (script,) = vsa_blocks("js")
        js = run_js(script, d, "build.sigstore.json", "attest.pub", digest)
        assert (1, True) == (js.returncode, "subject digest differs" in js.stderr), js.stderr

    def test_another_builder_or_source_is_refused(self, built: Path) -> None:
        """slsa-verifier's checks (replicated) refuse another builder id and another source repository."""
        st = statement(built / "build.intoto.json")
        digest = sha256_of(built / "dist" / "hello.txt")
        with pytest.raises(AssertionError, match="ErrorInvalidBuilderID"):
            slsa_verifier_checks(st, digest, "https://github.com/OTHER/REPO/.github/workflows/release.yml", REMOTE)
        with pytest.raises(AssertionError, match="ErrorMismatchSource"):
            slsa_verifier_checks(st, digest, BUILDER, "https://github.com/OTHER/REPO")

    def test_a_receipt_naming_a_file_names_no_subject(self, tmp_path: Path) -> None:
        """A receipt claiming an artifact the recorder never captured does not make it a subject."""
        s = SyntheticStream()
        s.receipt("build", "pass", artifact="dist/evil.bin", sha256="0" * 64)
        s.artifact("dist/good.bin", b"good")
        s.exit(0)
        s.write(tmp_path / "s.aos")
        a, found = attest_provenance(tmp_path / "s.aos", identity=Identity(BUILDER))
        assert ["dist/good.bin"] == [x.name for x in found]
        assert "dist/evil.bin" not in base64.b64decode(a.envelope["payload"]).decode()

    def test_a_capture_whose_bytes_are_not_its_digest_is_no_subject(self, tmp_path: Path) -> None:
        """A capture whose chunk bytes do not hash to the digest its artifact event states (a re-chained
        unsigned stream) is left out, and said; with nothing else captured, attest-subject."""
        s = SyntheticStream()
        s.artifact("dist/a.bin", b"real")
        forged = s.artifact("dist/b.bin", b"real")
        forged["attrs"]["sha256"] = hashlib.sha256(b"claimed").hexdigest()
        s.exit(0)
        s.write(tmp_path / "s.aos")
        a, found = attest_provenance(tmp_path / "s.aos", identity=Identity(BUILDER))
        assert ["dist/a.bin"] == [x.name for x in found]
        assert any("dist/b.bin" in n and "not a subject" in n for n in a.notes)
        r = invoke("observe", "attest", str(tmp_path / "s.aos"), "--provenance", "--subject", "dist/b.bin",
                   "--attester-id", BUILDER, "-o", str(tmp_path / "p.json"))  # fmt: skip
        assert (1, False) == (r.exit_code, (tmp_path / "p.json").exists())
        assert r.stderr.startswith("refused: attest-subject: ")


# -- refusals and options ---------------------------------------------------------------------


class TestOptions:
    def stream(self, tmp_path: Path, **source: Any) -> Path:
        s = SyntheticStream()
        if source:
            s.ops[0]["attrs"]["source"] = source
        s.artifact("dist/app.whl", b"wheel")
        s.artifact("dist/app.tar.gz", b"sdist")
        s.artifact("/home/runner/work/out/side.bin", b"outside")
        s.exit(0)
        s.write(tmp_path / "s.aos")
        return tmp_path / "s.aos"

    def test_no_attester_id_is_refused(self, tmp_path: Path) -> None:
        """Without --attester-id or $ALPHA_ATTESTER_ID no summary or provenance is written: attest-identity."""
        stream = self.stream(tmp_path)
        for what in ([], ["--provenance"]):
            r = invoke("observe", "attest", str(stream), *what, "-o", str(tmp_path / "p.json"))
            assert (1, False) == (r.exit_code, (tmp_path / "p.json").exists()), what
            assert r.stderr.startswith("refused: attest-identity: ")
        r = invoke("observe", "attest", str(stream), "--provenance", "--attester-id", "a builder", "-o", "-")
        assert 2 == r.exit_code

    def test_subject_globs(self, tmp_path: Path) -> None:
        """--subject keeps the captures whose recorded path matches; one matching none is attest-subject."""
        stream = self.stream(tmp_path)
        _, found = attest_provenance(stream, identity=Identity(BUILDER), patterns=["dist/*.whl"])
        assert ["dist/app.whl"] == [s.name for s in found]
        from observe.refusals import AttestSubject

        with pytest.raises(AttestSubject, match="nothing"):
            attest_provenance(stream, identity=Identity(BUILDER), patterns=["nothing/*"])

    def test_a_capture_outside_the_working_directory_is_named_by_its_file_name(self, tmp_path: Path) -> None:
        """An absolute recorded path gives the subject its file name, and a local remote (a path, a file: URL)
        gives no source uri."""
        for i, remote in enumerate(("/srv/repo.git", "file:///srv/repo.git")):
            (tmp_path / str(i)).mkdir()
            stream = self.stream(tmp_path / str(i), commit="a" * 40, tree="b" * 40, branch="main", remote=remote)
            a, found = attest_provenance(stream, identity=Identity(BUILDER))
            assert ["dist/app.whl", "dist/app.tar.gz", "side.bin"] == [s.name for s in found]
            source = a.statement["predicate"]["buildDefinition"]["resolvedDependencies"][0]
            assert ({"gitCommit": "a" * 40}, False) == (source["digest"], "uri" in source), remote
            text = base64.b64decode(a.envelope["payload"]).decode()
            assert [] == [t for t in ("/home/runner", "/srv/repo.git", "/lane") if t in text]

    def test_digest_blake3_adds_the_recorders_blake3(self, tmp_path: Path) -> None:
        """--digest blake3 adds the BLAKE3 the artifact event states beside sha256 (none stated: sha256 alone)."""
        from blake3 import blake3

        s = SyntheticStream()
        art = s.artifact("dist/a.bin", b"bytes")
        art["attrs"]["blake3"] = blake3(b"bytes").hexdigest()
        s.exit(0)
        s.write(tmp_path / "s.aos")
        _, found = attest_provenance(tmp_path / "s.aos", identity=Identity(BUILDER), digests=("sha256", "blake3"))
        assert {"sha256": hashlib.sha256(b"bytes").hexdigest(), "blake3": blake3(b"bytes").hexdigest()} == found[
            0
        ].digest

    def test_lane_configs_are_inputs_and_no_repository_no_source(self, tmp_path: Path) -> None:
        """A lane config the recorder captured itself is a resolved dependency (never a subject); a recording
        outside a git repository (source null) names no source."""
        s = SyntheticStream()
        s.ops[0]["attrs"]["source"] = None
        s.recorder_artifact("/etc/lane/config.json", b"{}", "ALPHA_LANE_DEVICE_CONFIG")
        s.artifact("dist/a.bin", b"x")
        s.exit(0)
        s.write(tmp_path / "s.aos")
        a, found = attest_provenance(tmp_path / "s.aos", identity=Identity(BUILDER))
        assert ["dist/a.bin"] == [x.name for x in found]
        deps = a.statement["predicate"]["buildDefinition"]["resolvedDependencies"]
        expected = {"sha256": hashlib.sha256(b"{}").hexdigest()}
        assert [{"name": "config.json", "digest": expected, "annotations": {"env": "ALPHA_LANE_DEVICE_CONFIG"}}] == deps

    def test_test_result_subjects_out(self, tmp_path: Path) -> None:
        """--test-result --subjects-out lists the same subjects as the statement, in sha256sum's format."""
        stream = with_tests(
            tmp_path / "s.aos", b'<testsuite><testcase classname="u" name="a"/></testsuite>', "tests-pass"
        )
        r = invoke("observe", "attest", str(stream), "--test-result", "--subjects-out", str(tmp_path / "sums"),
                   "-o", str(tmp_path / "t.json"))  # fmt: skip
        assert 0 == r.exit_code, r.stderr
        digest = statement(tmp_path / "t.json")["subject"][0]["digest"]["sha256"]
        assert f"{digest}  reports/junit.xml\n" == (tmp_path / "sums").read_text()

    def test_an_unsealed_stream_is_refused(self, tmp_path: Path) -> None:
        """A stream without its seal is refused by verify's name (stream-unsealed); nothing is written."""
        s = SyntheticStream()
        s.artifact("dist/a.bin", b"x")
        s.write(tmp_path / "s.aos", seal=False)
        r = invoke("observe", "attest", str(tmp_path / "s.aos"), "--provenance", "--attester-id", BUILDER,
                   "-o", str(tmp_path / "p.json"))  # fmt: skip
        assert (1, False) == (r.exit_code, (tmp_path / "p.json").exists())
        assert r.stderr.startswith("refused: stream-unsealed: ")

    def test_sha256sum_escapes_as_gnu_does(self, tmp_path: Path) -> None:
        """A name holding a newline or a backslash is escaped as GNU sha256sum writes it, and --check reads it."""
        d = tmp_path / "files"
        d.mkdir()
        names = ["plain.txt", "new\nline.txt", "back\\slash.txt"]
        for n in names:
            (d / n).write_bytes(n.encode())
        lines = sha256sum_lines({"name": n, "digest": {"sha256": sha256_of(d / n)}} for n in names)
        gnu = subprocess.run(["sha256sum", *names], cwd=d, capture_output=True, check=True).stdout
        assert gnu == lines
        (d / "sums").write_bytes(lines)
        assert 0 == subprocess.run(["sha256sum", "--check", "sums"], cwd=d, capture_output=True, check=False).returncode


# -- the test result --------------------------------------------------------------------------

JUNIT = b"""<testsuite name="unit">
<testcase classname="unit" name="a"/><testcase classname="unit" name="b"/><testcase classname="unit" name="c"/>
<testcase classname="unit" name="s"><skipped/></testcase>
<testcase classname="unit" name="f1"><failure message="no">x</failure></testcase>
<testcase classname="unit" name="f2"><failure message="no">y</failure></testcase>
<testcase classname="unit" name="e"><error message="boom">z</error></testcase>
</testsuite>
"""


def with_tests(path: Path, junit: bytes, gate: str) -> Path:
    """A command that wrote ``junit`` (captured) and exited 0, sealed with the verdict ``gate`` gives."""
    s = SyntheticStream(gate=gate)
    s.artifact("reports/junit.xml", junit)
    s.exit(0)
    s.add("verdict", s.evaluate(gate).to_attrs())
    s.write(path)
    return path


class TestTestResult:
    def test_documented_run(self, built: Path) -> None:
        """The block's test run gives PASSED, its one case, the captured junit.xml as subject and configuration,
        and in-toto-attestation's TestResult protobuf parses the predicate strictly."""
        from google.protobuf import json_format
        from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
        from in_toto_attestation.v1.statement import Statement
        from in_toto_attestation.v1.statement_pb2 import Statement as StatementPb

        st = statement(built / "tests.intoto.json")
        assert "https://in-toto.io/attestation/test-result/v0.1" == st["predicateType"]
        junit = {"name": "junit.xml", "digest": {"sha256": sha256_of(built / "junit.xml")}}
        assert ([junit], [junit]) == (st["subject"], st["predicate"]["configuration"])
        Statement.copy_from_pb(json_format.ParseDict(st, StatementPb())).validate()
        result = json_format.ParseDict(st["predicate"], test_result_pb2.TestResult())  # no unknown field ignored
        assert ("PASSED", ["unit.adds"], [], []) == (
            result.result,
            list(result.passed_tests),
            list(result.warned_tests),
            list(result.failed_tests),
        )

    def test_counts_match_the_gates(self, tmp_path: Path) -> None:
        """A failing run is FAILED, and the lists hold exactly the cases the gate counted."""
        from observe.interop.test_result import attest_test_result

        stream = with_tests(tmp_path / "s.aos", JUNIT, "tests-pass")
        a = attest_test_result(stream, identity=Identity())
        p = a.statement["predicate"]
        from observe.interop.verified import load_verified

        sealed = load_verified(stream).verification.verdict
        assert sealed is not None
        reason = next(c["reason"] for c in sealed["checks"] if c["name"] == "tests")
        counted = re.search(r"(\d+) tests: (\d+) passed, (\d+) failed, (\d+) errors?, (\d+) skipped", reason)
        assert counted is not None, reason
        total, passed, failed, errors, skipped = (int(g) for g in counted.groups())
        assert (passed, failed + errors, skipped, total) == (
            len(p["passedTests"]),
            len(p["failedTests"]),
            len(p["warnedTests"]),
            len(p["passedTests"]) + len(p["failedTests"]) + len(p["warnedTests"]),
        )
        assert ("FAILED", ["unit.f1", "unit.f2", "unit.e"], ["unit.s"]) == (
            p["result"],
            p["failedTests"],
            p["warnedTests"],
        )

    def test_a_skip_in_a_pass_is_warned(self, tmp_path: Path) -> None:
        """All [[tests]] passed with a skipped case: WARNED; none skipped: PASSED."""
        from observe.interop.test_result import attest_test_result

        ok = b'<testsuite><testcase classname="u" name="a"/><testcase classname="u" name="b"><skipped/></testcase>'
        ok += b"</testsuite>"
        a = attest_test_result(with_tests(tmp_path / "w.aos", ok, "tests-pass"), identity=Identity())
        assert "WARNED" == a.result
        clean = b'<testsuite><testcase classname="u" name="a"/></testsuite>'
        assert (
            "PASSED"
            == attest_test_result(with_tests(tmp_path / "p.aos", clean, "tests-pass"), identity=Identity()).result
        )

    def test_a_gate_without_tests_is_refused(self, tmp_path: Path) -> None:
        """A verdict whose gate has no [[tests]] gives no test result: attest-subject, nothing written."""
        stream = with_tests(tmp_path / "s.aos", b"<testsuite/>", "exit-zero")
        r = invoke("observe", "attest", str(stream), "--test-result", "-o", str(tmp_path / "t.json"))
        assert (1, False) == (r.exit_code, (tmp_path / "t.json").exists())
        assert r.stderr.startswith("refused: attest-subject: ")

    def test_a_verdict_edited_to_pass_is_refused(self, tmp_path: Path) -> None:
        """A failing verdict edited to pass (the stream re-chained, unsigned) is not restated: stream-verdict."""
        s = SyntheticStream(gate="tests-pass")
        s.artifact("reports/junit.xml", JUNIT)
        s.exit(0)
        attrs = s.evaluate("tests-pass").to_attrs()
        attrs["verdict"] = "pass"
        attrs["checks"] = [{**c, "status": "pass"} for c in attrs["checks"]]
        s.add("verdict", attrs)
        s.write(tmp_path / "s.aos")
        r = invoke("observe", "attest", str(tmp_path / "s.aos"), "--test-result", "-o", str(tmp_path / "t.json"))
        assert (1, False) == (r.exit_code, (tmp_path / "t.json").exists())
        assert r.stderr.startswith("refused: stream-verdict: ")

    def test_lists_are_bounded_and_url_is_the_resource_uri(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Each id list holds at most MAX_IDS ids and stderr says what was cut; --resource-uri is the url."""
        import observe.interop.test_result

        monkeypatch.setattr(observe.interop.test_result, "MAX_IDS", 2)
        stream = with_tests(tmp_path / "s.aos", JUNIT, "tests-pass")
        url = "s3://evidence/aos/0123.aos"
        r = invoke(
            "observe", "attest", str(stream), "--test-result", "--resource-uri", url, "-o", str(tmp_path / "t.json")
        )
        assert 0 == r.exit_code, r.stderr
        p = statement(tmp_path / "t.json")["predicate"]
        assert (["unit.a", "unit.b"], ["unit.f1", "unit.f2"], url) == (p["passedTests"], p["failedTests"], p["url"])
        assert "passedTests: the first 2 of 3 ids are listed" in r.stderr
        assert "failedTests: the first 2 of 3 ids are listed" in r.stderr


def _captured(d: Path, mib: int) -> Path:
    """A stream (exit-zero's pass) that captured a file of ``mib`` MiB that does not compress."""
    from tests.helpers.run import alpha

    out = d / f"captured-{mib}.aos"
    script = f"mkdir -p out-{mib} && head -c {mib * (1 << 20)} /dev/urandom > out-{mib}/blob.bin"
    proc = alpha("observe", "gate", "exit-zero", "--quiet", "--artifact", f"out-{mib}/*", "--out", str(out), "--",
                 "sh", "-c", script, cwd=d, timeout=120)  # fmt: skip
    assert 0 == proc.returncode, proc.stderr
    return out


def test_provenance_memory_stays_near_the_file_size(tmp_path: Path) -> None:
    """The provenance hashes each capture a chunk at a time in a second pass, never holding a captured file
    besides the stream's own bytes: the peak grows with the file once (64 MiB captured: it was about 4x the file)."""
    from tests.observe.interop.test_export import _peak_rss_mib

    small, big = _captured(tmp_path, 2), _captured(tmp_path, 64)
    file_mib = big.stat().st_size / (1 << 20)
    argv = ["observe", "attest", "{}", "--provenance", "--attester-id", BUILDER, "-o", "p.json"]
    base = _peak_rss_mib([a.replace("{}", str(small)) for a in argv], tmp_path)
    peak = _peak_rss_mib([a.replace("{}", str(big)) for a in argv], tmp_path)
    assert peak - base < 1.4 * file_mib + 24, (base, peak, file_mib)
