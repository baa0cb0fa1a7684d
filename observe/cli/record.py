"""Recording commands: record, step, receipt, artifact, tail.

Importing this module loads click only. ``receipt``, ``step`` and ``artifact``
run inside recordings, often hundreds of times, so their path
(``observe.channel.client``) never imports pyarrow; ``record`` and ``tail`` load the
writer and reader when they run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from aos.attrs import RECEIPT_STATUSES

if TYPE_CHECKING:
    from observe.recorder.record import RecordOptions

__all__ = ["COMMANDS", "CommandAfterOptions", "example", "options_from_click", "recording_options", "without_numpy"]

F = TypeVar("F", bound=Callable[..., Any])


def example(*lines: str) -> str:
    """A help epilog that ends the ``--help`` text with example command lines (click keeps them as written)."""
    return "Example:\n\n\b\n" + "\n".join(f"  {line}" for line in lines)


def public_key_option(help_text: str) -> Callable[[F], F]:
    """``--key PUBKEY``: an Ed25519 public key (PEM) the stream's seal is checked against, as every reading
    command takes it (``verify``, ``show``, ``verdict``, ``report``, ``query``)."""
    return click.option("--key", "key", type=click.Path(dir_okay=False), default=None, metavar="PUBKEY", help=help_text)


class CommandAfterOptions(click.Command):
    """A command whose last argument (COMMAND...) is another program's argv.

    Options before ``--`` are parsed strictly: a mistyped one is a usage error
    (exit 2, with a suggestion) and the command does not run. Everything after
    ``--`` is the command, verbatim. Without ``--`` the command starts at the
    first argument that is neither an option (or its value) nor one of the
    declared arguments before COMMAND (``gate NAME``, ``step NAME``), and is
    kept verbatim from there (``record make -k`` records ``make -k``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        settings = dict(kwargs.get("context_settings") or {})
        settings.update(ignore_unknown_options=False, allow_interspersed_args=True)
        kwargs["context_settings"] = settings
        super().__init__(*args, **kwargs)

    def _command_start(self, ctx: click.Context, args: list[str]) -> int:
        """The index of ``--`` or of the command's first word in ``args`` (``len(args)`` when neither)."""
        params = self.get_params(ctx)
        declared = sum(1 for p in params if isinstance(p, click.Argument)) - 1
        takes_value: set[str] = set()
        for p in params:
            if isinstance(p, click.Option) and not (p.is_flag or p.count):
                takes_value.update(p.opts)
        positional = 0
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--":
                return i
            if arg.startswith("-") and arg != "-":
                i += 2 if arg in takes_value else 1  # --opt=value and unknown options: one word
                continue
            if positional < declared:
                positional += 1
                i += 1
                continue
            return i
        return len(args)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = list(args)
        start = self._command_start(ctx, args)
        tail = args[start + 1 :] if start < len(args) and args[start] == "--" else args[start:]
        try:
            return super().parse_args(ctx, [*args[:start], "--", *tail])
        except click.NoSuchOption as exc:
            hint = ""
            if exc.possibilities:
                hint = f" (did you mean {exc.possibilities[0]}?)"  # the closest first (difflib)
            raise click.UsageError(
                f"no such option: {exc.option_name}{hint}; the command to run goes after --", ctx
            ) from None


def _parse_label(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not K=V")
        labels[key] = value
    return labels


def recording_options(func: F) -> F:
    """Add the recording options that ``record`` and ``gate`` share (DESIGN.md)."""
    options = [
        click.option(
            "--out",
            # Not click's dir_okay=False: an --out that cannot be written is refused by the
            # recorder (stream-write, exit 125), a directory included.
            type=click.Path(path_type=Path),
            default=None,
            help="Stream file to write (default: a new file under ./aos-streams/, its path printed at the end).",
        ),
        click.option(
            "--artifact",
            "artifact",
            multiple=True,
            metavar="PATH_OR_GLOB",
            help="Capture these files after the command ends (repeatable; directories recurse).",
        ),
        click.option(
            "--timeout",
            type=click.FloatRange(min=0, min_open=True),
            default=None,
            metavar="SECONDS",
            help="SIGTERM the command's process group after SECONDS (then SIGKILL); exit 124.",
        ),
        click.option(
            "--pty",
            is_flag=True,
            default=False,
            help="Run under a pseudo-terminal: exact interleaving and colour; stdout and stderr become one stdout "
            "stream, and stdin is forwarded to it (end of input is the terminal's end of file).",
        ),
        click.option(
            "--sign-key",
            type=click.Path(dir_okay=False, path_type=Path),
            default=None,
            metavar="FILE",
            help="Ed25519 private key to sign checkpoints and the seal: a file (which the command, running as you, "
            "can read) or a pipe such as <(...).",
        ),
        click.option(
            "--sign-key-env",
            default=None,
            metavar="NAME",
            help="Sign with the private key (PEM) in environment variable NAME, which is removed from the "
            "command's environment: the command never sees the key.",
        ),
        click.option("--mask", multiple=True, metavar="VALUE", help="Mask VALUE in everything recorded (repeatable)."),
        click.option(
            "--mask-env",
            multiple=True,
            metavar="NAME",
            help="Mask the value of environment variable NAME (repeatable; keeps the value out of `ps`).",
        ),
        click.option(
            "--mask-file",
            multiple=True,
            type=click.Path(dir_okay=False, path_type=Path),
            metavar="FILE",
            help="Mask each line of FILE (repeatable; a file or a pipe such as <(printf '%s\\n' \"$TOKEN\")).",
        ),
        click.option(
            "--env",
            "env_names",
            multiple=True,
            metavar="NAME",
            help="Also record the value of environment variable NAME in stream.open (repeatable; masked still).",
        ),
        click.option(
            "--label",
            multiple=True,
            metavar="K=V",
            callback=_parse_label,
            help="Label recorded in stream.open (repeatable).",
        ),
        click.option("--quiet", is_flag=True, default=False, help="Do not echo the command's output."),
        click.option(
            "--artifact-max-bytes",
            type=click.IntRange(min=0),
            default=None,
            metavar="N",
            help="Record only the hashes of artifacts larger than N bytes.",
        ),
        click.option(
            "--observe-devices",
            type=click.Choice(["auto", "nvml", "off"]),
            default="auto",
            show_default=True,
            help="Observe GPUs through NVML in the recorder (auto: when NVML loads; nvml: record why it does not; "
            "off: no device or process-tree sampling).",
        ),
        click.option(
            "--sample-interval",
            type=click.FloatRange(min=0, min_open=True),
            default=1.0,
            show_default=True,
            metavar="SECONDS",
            help="Seconds between telemetry samples of the process tree and the GPUs.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def without_numpy() -> None:
    """Keep pyarrow from importing numpy in this process (it works without it).

    The writer builds Arrow arrays from Python lists only; numpy is a third of
    pyarrow's import time, which is most of ``record -- true``'s start-up.
    Only for CLI processes that record: never call it in a process that needs numpy.
    """
    if "numpy" not in sys.modules and "pyarrow" not in sys.modules:
        sys.modules["numpy"] = None  # type: ignore[assignment]


def options_from_click(**kwargs: Any) -> RecordOptions:
    """The ``RecordOptions`` for the parameters ``recording_options`` added (others are ignored)."""
    from observe.recorder.record import RecordOptions
    from observe.secrets.sources import mask_file_values

    labels = kwargs.get("label") or {}
    if not isinstance(labels, dict):  # called with raw K=V strings
        labels = _parse_label(None, None, tuple(labels))  # type: ignore[arg-type]
    if kwargs.get("sign_key") is not None and kwargs.get("sign_key_env") is not None:
        raise click.UsageError("give the signing key once: --sign-key FILE or --sign-key-env NAME")
    try:  # read now, before the command runs: a mask that cannot be read must not record in clear
        from_files = mask_file_values(kwargs.get("mask_file") or ())
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--mask-file") from None
    return RecordOptions(
        out=kwargs.get("out"),
        artifacts=tuple(kwargs.get("artifact") or ()),
        timeout=kwargs.get("timeout"),
        pty=bool(kwargs.get("pty")),
        sign_key=kwargs.get("sign_key"),
        sign_key_env=kwargs.get("sign_key_env"),
        masks=(*(kwargs.get("mask") or ()), *from_files),
        mask_env=tuple(kwargs.get("mask_env") or ()),
        env=tuple(kwargs.get("env_names") or ()),
        labels=labels,
        quiet=bool(kwargs.get("quiet")),
        artifact_max_bytes=kwargs.get("artifact_max_bytes"),
        gate=kwargs.get("gate"),
        observe_devices=str(kwargs.get("observe_devices") or "auto"),
        sample_interval=float(kwargs.get("sample_interval") or 1.0),
        echo_to_stderr=bool(kwargs.get("echo_to_stderr")),
    )


@click.command(
    cls=CommandAfterOptions,
    epilog=example("alpha observe record --out run.aos --artifact 'dist/*' -- make test"),
)
@recording_options
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    default=False,
    help="Print what was recorded (stream path and id, exit code, seal) as one JSON document on stdout; "
    "the command's echo goes to stderr.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def record(command: tuple[str, ...], as_json: bool, **kwargs: Any) -> None:
    """Record COMMAND as a sealed AOS stream; exit with its exit code.

    Exit codes: the command's own; 128+N if killed by signal N; 124 on --timeout;
    126 cannot execute; 127 not found; 125 the recorder itself failed. A
    mistyped option before -- is a usage error (2) and COMMAND does not run.
    """
    without_numpy()
    from aos.refusals import Refusal
    from observe.cli.refusing import refuse
    from observe.recorder.record import record as run_record

    options = options_from_click(**kwargs, echo_to_stderr=as_json)
    try:
        result = run_record(command, options)
    except Refusal as exc:
        refuse(exc, 125)
    if as_json:
        import json

        seal = result.seal
        doc = {
            "stream": str(result.path),
            "stream_id": result.stream_id,
            "exit_code": result.exit_code,
            "command_exit": result.command_exit,
            "signal": result.signal,
            "timed_out": result.timed_out,
            "recorder_failed": result.recorder_failed,
            "seal": None
            if seal is None
            else {"head": seal.head, "events": seal.events, "bytes": seal.bytes, "file_blake3": seal.file_blake3},
        }
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    sys.exit(result.exit_code)


@click.command(
    cls=CommandAfterOptions,
    epilog=example("alpha observe step unit-tests -- python3 -m pytest -q"),
)
@click.argument("name")
@click.option("--standalone", is_flag=True, default=False, help="Outside a recording, run COMMAND anyway.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def step(name: str, standalone: bool, command: tuple[str, ...]) -> None:
    """Run COMMAND as a named span of the enclosing recording; exit with its exit code."""
    from observe.channel import client

    argv = list(command)
    # Options after NAME are not parsed by click (they could be the command's own):
    # accept --standalone there too, up to the "--".
    while argv[:1] == ["--standalone"]:
        standalone = True
        argv = argv[1:]
    if argv[:1] == ["--"]:  # NAME -- CMD: click keeps the "--" after the first argument
        argv = argv[1:]
    if not argv:
        raise click.UsageError("step needs a command after NAME")
    sys.exit(client.step(name, argv, standalone=standalone))


def _field(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> list[tuple[str, str]]:
    out = []
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not K=V")
        out.append((key, value))
    return out


@click.command(epilog=example("alpha observe receipt unit-tests --status pass --field passed=120"))
@click.argument("name")
@click.option("--status", default="info", show_default=True, type=click.Choice(RECEIPT_STATUSES))
@click.option(
    "--field",
    "fields",
    multiple=True,
    metavar="K=V",
    callback=_field,
    help="A field (repeatable); V is parsed as JSON when it parses, else kept as a string.",
)
@click.option("--json", "json_obj", default=None, metavar="OBJ", help="Fields as one JSON object (--field wins).")
def receipt(name: str, status: str, fields: list[tuple[str, str]], json_obj: str | None) -> None:
    """Report a fact to the enclosing recording as a receipt event."""
    from observe.channel import client

    try:
        merged = client.build_fields(fields, json_obj)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--json") from exc
    sys.exit(client.receipt(name, status, merged))


@click.command(epilog=example("alpha observe artifact dist/app.tar.gz 'reports/*.xml'"))
@click.argument("paths", nargs=-1, required=True)
def artifact(paths: tuple[str, ...]) -> None:
    """Capture PATHs (files, directories, globs) into the enclosing recording now."""
    from observe.channel import client

    sys.exit(client.artifact(list(paths)))


@click.command(epilog=example("alpha observe tail aos-streams/20250101T120000.000000Z-1a2b3c.aos --idle 60"))
@click.argument("stream", type=click.Path(path_type=Path))  # a directory is stream-missing, not a usage error
@click.option(
    "--idle",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="After SECONDS without growth, check that the recorder still runs; end (stream-unsealed) when it is "
    "gone. Also how long a missing file is waited for. Default 10.",
)
@click.option(
    "--timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS", help="Give up after SECONDS in all."
)
def tail(stream: Path, idle: float | None, timeout: float | None) -> None:
    """Follow STREAM while it is written, printing its stdout and stderr; stop at the seal.

    Exits 0 at the seal; 1 when it gave up (--timeout), or refused: the stream is
    damaged, never appeared, or stopped growing while its recorder is gone.
    """
    from aos.refusals import Refusal
    from observe.cli.refusing import refuse
    from observe.readback.tail import follow

    try:
        sealed = follow(stream, idle=idle, timeout=timeout)
    except Refusal as exc:
        refuse(exc, 1)
    if not sealed:
        click.echo(f"alpha observe tail: stopped before the seal of {stream}", err=True)
    sys.exit(0 if sealed else 1)


COMMANDS: list[click.Command] = [record, step, receipt, artifact, tail]
