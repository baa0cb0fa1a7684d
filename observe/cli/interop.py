"""Interop commands: ``attest`` (an in-toto VSA, provenance or test result in DSSE) and ``export``.

Both read the stream once and verify it first; a stream that does not verify
is refused by name (``refused: NAME: detail`` on stderr, exit 1) and nothing is
written. Usage errors exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from observe.cli.options import (
    STREAM,
    example,
    gate_file_option,
    out_option,
    public_key_option,
    reports_refusals,
    sign_key_options,
    signing_key,
)
from observe.env import AttestVars

if TYPE_CHECKING:
    from aos.signing import Signer, Verifier

__all__ = ["COMMANDS", "attest_command", "export_command"]


@example(
    "alpha observe attest ci.aos --sign-key attest.key --key seal.pub --attester-id https://ci.example/builder"
    " -o ci.aos.intoto.json --bundle ci.aos.sigstore.json",
    "alpha observe attest build.aos --provenance --subject 'dist/*' --subjects-out dist.sha256"
    " --attester-id https://ci.example/builder --sign-key attest.key -o build.provenance.json",
    "alpha observe attest tests.aos --test-result --sign-key attest.key -o tests.intoto.json",
)
@click.command("attest")
@click.argument("stream", type=STREAM)
@click.option(
    "--provenance",
    is_flag=True,
    help="A SLSA provenance v1 of the files the recorder captured, instead of the verdict's summary (VSA).",
)
@click.option(
    "--test-result",
    is_flag=True,
    help="An in-toto Test Result of the [[tests]] the sealed verdict judged, instead of the summary (VSA).",
)
@sign_key_options("the envelope")
@public_key_option("Also require the stream's seal to be signed by this Ed25519 public key (as verify --key).")
# The seal's public key before the one vocabulary; its own (hidden) parameter, since the old --key beside it
# was the attester's private key: `attest --key attest.key --seal-key seal.pub` still means what it meant.
@click.option("--seal-key", "seal_key", type=click.Path(dir_okay=False), default=None, hidden=True)
@gate_file_option("The definition of a gate from a file (repeatable); built-in gates need none.")
@click.option(
    "--attester-id",
    "attester_id",
    default=None,
    metavar="URI",
    envvar=AttestVars.ATTESTER_ID,
    help="Who attests, a URI you own: the VSA's verifier.id, the provenance's builder.id"
    f" (or ${AttestVars.ATTESTER_ID}).",
)
@click.option(
    "--policy-uri",
    default=None,
    metavar="URI",
    envvar=AttestVars.POLICY_URI,
    help=f"The VSA's policy.uri (or ${AttestVars.POLICY_URI}); default: urn:alpha-observe:gate:NAME.",
)
@click.option(
    "--resource-uri",
    default=None,
    metavar="URI",
    help="The VSA's resourceUri, the test result's url (e.g. the stream's store URL);"
    " default: urn:alpha-observe:stream:ID (the test result: no url).",
)
@click.option(
    "--subject",
    "patterns",
    multiple=True,
    metavar="GLOB",
    help="--provenance/--test-result: only the captured files whose recorded path matches (repeatable).",
)
@click.option(
    "--subjects-out",
    default=None,
    metavar="FILE",
    help="--provenance/--test-result: also write the subjects in sha256sum's format (for subject-checksums).",
)
@click.option(
    "--digest",
    "digests",
    type=click.Choice(["sha256", "blake3"]),
    multiple=True,
    help="Subjects carry sha256; --digest blake3 adds BLAKE3 (repeatable).",
)
@click.option(
    "--bundle",
    "bundle",
    default=None,
    metavar="FILE",
    help="Also write the envelope as a Sigstore bundle v0.3 (its key id as a public-key hint); needs a signing key.",
)
@out_option("Where to write the envelope (- for stdout).", required=True, aliases=("--output",))
@reports_refusals()
def attest_command(
    stream: Path,
    provenance: bool,
    test_result: bool,
    sign_key: Path | None,
    sign_key_env: str | None,
    key: str | None,
    seal_key: str | None,
    gate_files: tuple[Path, ...],
    attester_id: str | None,
    policy_uri: str | None,
    resource_uri: str | None,
    patterns: tuple[str, ...],
    subjects_out: str | None,
    digests: tuple[str, ...],
    bundle: str | None,
    out: str,
) -> None:
    """Attest STREAM as an in-toto statement in a DSSE envelope: its verdict (SLSA VSA), or with
    --provenance its build (SLSA provenance v1), or with --test-result its tests (in-toto Test Result).

    STREAM is verified first (intact and sealed). The VSA's subject is the stream
    file, its sealed verdict re-evaluated by the same gate (found by name and
    digest): a pass is PASSED, a fail or inconclusive FAILED. The provenance's and
    test result's subjects are the files the recorder captured. The summary and the
    provenance name the attester id (--attester-id), required: no default names anyone. Signed with --sign-key
    or --sign-key-env (Ed25519), else its signatures list is empty; --bundle also
    writes it as a Sigstore bundle. Exit 0 written, 1 refused (nothing written), 2 usage.
    """
    from observe.interop.identity import Identity, is_uri
    from observe.interop.verified import write_output

    if provenance and test_result:
        raise click.UsageError("--provenance or --test-result: one statement per command")
    what = "provenance" if provenance else "test-result" if test_result else None

    for value, hint in ((resource_uri, "--resource-uri"), (policy_uri, "--policy-uri"), (attester_id, "--attester-id")):
        if value is not None and not is_uri(value):
            raise click.BadParameter(f"{value!r} is not a URI (scheme:rest)", param_hint=hint)
    if subjects_out is not None and what is None:
        raise click.UsageError("--subjects-out lists the captured files: give --provenance or --test-result")
    if patterns and what is None:
        raise click.UsageError("--subject chooses captured files: give --provenance or --test-result")
    signer, seal = _attest_keys(sign_key, sign_key_env, key, seal_key)
    if bundle is not None and signer is None:
        raise click.UsageError("--bundle needs --sign-key: a Sigstore bundle holds a signed envelope")
    outputs = [o for o in (out, bundle, subjects_out) if o is not None and o != "-"]
    if len(set(outputs)) != len(outputs):
        raise click.UsageError("-o, --bundle and --subjects-out name the same file")
    identity = Identity(attester_id, policy_uri, resource_uri)
    wanted = ("sha256", *[d for d in digests if d != "sha256"])
    listed = None
    if what == "provenance":
        from observe.interop.provenance import attest_provenance, sha256sum_lines

        a, found = attest_provenance(
            stream, identity=identity, signer=signer, seal_key=seal, patterns=patterns, digests=wanted
        )
        listed = sha256sum_lines(s.descriptor() for s in found)
    elif what == "test-result":
        from observe.interop.provenance import sha256sum_lines
        from observe.interop.test_result import attest_test_result

        a = attest_test_result(
            stream,
            identity=identity,
            signer=signer,
            seal_key=seal,
            gate_files=gate_files,
            patterns=patterns,
            digests=wanted,
        )
        listed = sha256sum_lines(a.statement["subject"])
    else:
        from observe.interop.attest import attest

        a = attest(stream, identity=identity, signer=signer, seal_key=seal, gate_files=gate_files, digests=wanted)
    write_output(out, a.envelope_bytes())
    if bundle is not None:
        write_output(bundle, a.bundle_bytes())
    if subjects_out is not None and listed is not None:
        write_output(subjects_out, listed)
    for note in a.notes:
        click.echo(f"alpha observe attest: {note}", err=True)
    for written in (out, bundle, subjects_out):
        if written is not None and written != "-":
            click.echo(f"alpha observe attest: wrote {written}", err=True)


def _attest_keys(
    sign_key: Path | None, sign_key_env: str | None, key: str | None, seal_key: str | None
) -> tuple[Signer | None, Verifier | None]:
    """The attester's private key and the seal's public key.

    Before the one vocabulary, ``attest --key`` was the attester's private key and
    ``--seal-key`` the seal's public key: a ``--key`` file that holds a private key is
    still taken as the attester's, and ``--seal-key`` as the seal's, silently as every
    hidden alias, so an old command line signs and checks as it did.
    """
    from aos.signing import Verifier, load_key, load_public_key

    signer = signing_key(sign_key, sign_key_env)
    loaded = load_key(key) if key is not None else None
    if isinstance(loaded, Verifier) or loaded is None:
        if loaded is not None and seal_key is not None:
            raise click.UsageError("give the seal's public key once: --key PUBKEY")
        return signer, loaded if loaded is not None else (load_public_key(seal_key) if seal_key else None)
    if signer is not None:
        raise click.UsageError("--key is the seal's public key; the attester's private key is --sign-key")
    return loaded, load_public_key(seal_key) if seal_key is not None else None


@example(
    "alpha observe export ci.aos --format otlp -o ci.otlp.json",
    "alpha observe export ci.aos --format otlp-proto --endpoint http://127.0.0.1:4318",
    "alpha observe export ci.aos --format asciicast -o ci.cast && asciinema play ci.cast",
    "alpha observe export ci.aos --format arrow -o ci.arrow",
    "alpha observe export ci.aos --format parquet -o ci.parquet",
)
@click.command("export")
@click.argument("stream", type=STREAM)
@click.option(
    "--format",
    "fmt",
    required=True,
    type=click.Choice(["otlp", "otlp-proto", "asciicast", "arrow", "parquet"]),
    help="otlp: OTLP/JSON traces; otlp-proto: the same as binary protobuf; asciicast: asciicast v2 "
    "(the terminal output with its timing); arrow: the verified events as an uncompressed Arrow IPC file; "
    "parquet: the verified events as Parquet, with the columns of query's events table.",
)
@out_option("Where to write it (- for stdout).", aliases=("--output",))
@click.option(
    "--endpoint",
    "endpoint",
    default=None,
    metavar="URL",
    help="POST the traces (otlp or otlp-proto) to this OTLP/HTTP receiver (/v1/traces when URL has no path).",
)
@reports_refusals()
def export_command(stream: Path, fmt: str, out: str | None, endpoint: str | None) -> None:
    """Export STREAM as OTLP traces, an asciicast v2 recording, an Arrow IPC file or Parquet.

    STREAM is verified first (intact and sealed); exit 0 written (and sent), 1
    refused (nothing written) or not accepted by the receiver, 2 usage.
    At least one of -o and --endpoint; --endpoint only for otlp and otlp-proto.
    """
    import json

    from observe.interop import otlp_send
    from observe.interop.verified import load_verified, write_output

    if out is None and endpoint is None:
        raise click.UsageError("give -o FILE, --endpoint URL, or both")
    url = None
    if endpoint is not None:
        if fmt not in otlp_send.CONTENT_TYPES:
            raise click.BadParameter(f"--endpoint sends traces: --format otlp or otlp-proto, not {fmt}")
        try:
            url = otlp_send.traces_url(endpoint)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--endpoint") from None
    if fmt == "otlp-proto":
        try:
            otlp_send.require_protobuf()
        except otlp_send.MissingProtobuf as exc:
            raise click.UsageError(str(exc)) from None
    sent = None
    s = load_verified(stream)
    if fmt in ("otlp", "otlp-proto"):
        from observe.interop.otlp import otlp_traces

        doc = otlp_traces(s)
        if fmt == "otlp":
            body = (json.dumps(doc, ensure_ascii=False) + "\n").encode("utf-8")
        else:
            body = otlp_send.otlp_protobuf(doc)
        if out is not None:
            write_output(out, body)
        if url is not None:
            sent = otlp_send.post(url, body, otlp_send.CONTENT_TYPES[fmt])
    elif fmt == "asciicast":
        from observe.interop.asciicast import asciicast_chunks

        write_output(str(out), asciicast_chunks(s))
    elif fmt == "parquet":
        from observe.interop.parquet_file import parquet_chunks

        write_output(str(out), parquet_chunks(s))
    else:
        from observe.interop.arrow_file import arrow_file_chunks

        write_output(str(out), arrow_file_chunks(s))
    if out is not None and out != "-":
        click.echo(f"alpha observe export: wrote {out} ({fmt})", err=True)
    if sent is not None:
        click.echo(f"alpha observe export: {sent}", err=True)


COMMANDS: list[click.Command] = [attest_command, export_command]
