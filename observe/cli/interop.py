"""Interop commands: ``attest`` (a DSSE/in-toto/SLSA VSA envelope) and ``export`` (OTLP, asciicast, Arrow).

Both read the stream once and verify it first; a stream that does not verify
is refused by name (``refused: NAME: detail`` on stderr, exit 1) and nothing is
written. Usage errors exit 2.
"""

from __future__ import annotations

import re
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

if TYPE_CHECKING:
    from aos.signing import Signer, Verifier

__all__ = ["COMMANDS", "attest_command", "export_command"]

_URI = re.compile(r"[a-z][a-z0-9+.-]*:\S+")


@example(
    "alpha observe attest ci.aos --sign-key attest.key --key seal.pub -o ci.aos.intoto.json"
    " --bundle ci.aos.sigstore.json"
)
@click.command("attest")
@click.argument("stream", type=STREAM)
@sign_key_options("the envelope")
@public_key_option("Also require the stream's seal to be signed by this Ed25519 public key (as verify --key).")
# The seal's public key before the one vocabulary; its own (hidden) parameter, since the old --key beside it
# was the attester's private key: `attest --key attest.key --seal-key seal.pub` still means what it meant.
@click.option("--seal-key", "seal_key", type=click.Path(dir_okay=False), default=None, hidden=True)
@gate_file_option("The definition of a gate from a file (repeatable); built-in gates need none.")
@click.option(
    "--resource-uri",
    default=None,
    metavar="URI",
    help="The VSA's resourceUri (e.g. the stream's store URL); default: the stream's file:// URI.",
)
@click.option(
    "--digest",
    "digests",
    type=click.Choice(["sha256", "blake3"]),
    multiple=True,
    help="A digest of the stream file the subject carries (repeatable; default: sha256 and blake3).",
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
    sign_key: Path | None,
    sign_key_env: str | None,
    key: str | None,
    seal_key: str | None,
    gate_files: tuple[Path, ...],
    resource_uri: str | None,
    digests: tuple[str, ...],
    bundle: str | None,
    out: str,
) -> None:
    """Attest STREAM's sealed verdict as an in-toto statement (SLSA VSA) in a DSSE envelope.

    The envelope's payload is an in-toto Statement v1 whose subject is the
    stream file and whose predicate is a SLSA verification summary v1; it is
    signed with --sign-key or --sign-key-env (Ed25519), else its signatures list is empty.
    STREAM is verified first, and its sealed verdict re-evaluated by the same gate
    (found by name and digest); a pass is PASSED, a fail or inconclusive FAILED.
    --bundle also writes it as a Sigstore bundle for Sigstore verifiers.
    Exit 0 written, 1 refused (nothing written), 2 usage.
    """
    from observe.interop.attest import DIGESTS, attest
    from observe.interop.verified import write_output

    if resource_uri is not None and not _URI.fullmatch(resource_uri):
        raise click.BadParameter(f"{resource_uri!r} is not a URI (scheme:rest)", param_hint="--resource-uri")
    signer, seal = _attest_keys(sign_key, sign_key_env, key, seal_key)
    if bundle is not None and signer is None:
        raise click.UsageError("--bundle needs --sign-key: a Sigstore bundle holds a signed envelope")
    if bundle is not None and bundle == out:
        raise click.UsageError("--bundle and -o name the same file")
    a = attest(
        stream,
        signer=signer,
        seal_key=seal,
        gate_files=gate_files,
        resource_uri=resource_uri,
        digests=tuple(dict.fromkeys(digests)) or DIGESTS,
    )
    write_output(out, a.envelope_bytes())
    if bundle is not None:
        write_output(bundle, a.bundle_bytes())
    for note in a.notes:
        click.echo(f"alpha observe attest: {note}", err=True)
    for written in (out, bundle):
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
)
@click.command("export")
@click.argument("stream", type=STREAM)
@click.option(
    "--format",
    "fmt",
    required=True,
    type=click.Choice(["otlp", "otlp-proto", "asciicast", "arrow"]),
    help="otlp: OTLP/JSON traces; otlp-proto: the same as binary protobuf; asciicast: asciicast v2 "
    "(the terminal output with its timing); arrow: the verified events as an uncompressed Arrow IPC file.",
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
    """Export STREAM as OTLP traces, an asciicast v2 recording or an Arrow IPC file.

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
    else:
        from observe.interop.arrow_file import arrow_file_chunks

        write_output(str(out), arrow_file_chunks(s))
    if out is not None and out != "-":
        click.echo(f"alpha observe export: wrote {out} ({fmt})", err=True)
    if sent is not None:
        click.echo(f"alpha observe export: {sent}", err=True)


COMMANDS: list[click.Command] = [attest_command, export_command]
