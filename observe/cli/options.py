"""How an ``alpha`` command is written: its example, its refusals, and the options commands share.

Every command module imports this one and no other command module. A command is
written the same way everywhere (``observe`` and ``tracker`` alike)::

    @example("alpha observe verify run.aos --key ci.pub")
    @click.command("verify")
    @click.argument("stream", type=STREAM)
    @public_key_option("Ed25519 public key (PEM) the seal must be signed by.")
    @reports_refusals()
    def verify_command(stream: Path, key: str | None) -> None: ...

``example`` goes above the click decorator (it fills the command's epilog, once);
``reports_refusals`` goes right above the function, so a refusal raised anywhere in
its body is printed as ``refused: NAME: detail`` and exits with the command's code.
Functions are named ``<words of the command>_command`` (``<words>_group`` for a group).
The recording options that ``record`` and ``gate`` share live here too, with the command
class that takes COMMAND... after them and ``options_from_click``, which turns them
into the recorder's ``RecordOptions``.
Importing this module loads click and ``aos.refusals`` only: the key loaders import
``aos.signing`` (cryptography) when a key is given.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from aos.refusals import Refusal
from observe.env import TrackerVars
from observe.exits import Exit, ResourceExit

if TYPE_CHECKING:
    from aos.signing import Signer, Verifier
    from observe.recorder.record import RecordOptions

__all__ = [
    "STREAM",
    "VOCABULARY",
    "AliasedOption",
    "CommandAfterOptions",
    "Exit",
    "db_option",
    "example",
    "gate_file_option",
    "json_option",
    "observer_key_options",
    "one_blas_thread",
    "option",
    "options_from_click",
    "out_option",
    "private_key",
    "public_key",
    "public_key_option",
    "recording_options",
    "reports_refusals",
    "sign_key_options",
    "signing_key",
    "without_numpy",
]

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=click.Command)

#: A stream argument is any path: what is not a regular file is refused as stream-missing, not a usage error.
STREAM = click.Path(path_type=Path)


def example(*lines: str) -> Callable[[C], C]:
    """Return a decorator that ends the command's ``--help`` with these example command lines.

    It goes above ``@click.command`` (or ``@group.command``), beside the command it
    shows. A command has one example block: a second one raises ``ValueError``.
    """

    def attach(command: C) -> C:
        if not isinstance(command, click.Command):
            raise TypeError("@example goes above the @click.command decorator")
        if command.epilog:
            raise ValueError(f"command {command.name!r} already has an example")
        command.epilog = "Example:\n\n\b\n" + "\n".join(f"  {line}" for line in lines)
        return command

    return attach


def reports_refusals(
    exit: Exit = Exit.FAIL,
    *,
    by_name: Mapping[str, Exit] | None = None,
    translate: Callable[[Exception], Refusal | None] | None = None,
) -> Callable[[F], F]:
    """Return a decorator that prints a refusal the one way the CLI prints them and exits.

    A refusal raised by the command is printed as ``refused: NAME: detail`` on stderr
    (after its traceback under ``ALPHA_DEBUG=1``);
    the exit code is ``by_name[NAME]`` where the refusal's name is listed, else
    ``exit``. An error of the machine (a thread, memory, a descriptor or disk space that
    could not be had: ``aos.resources``) is refused as ``resource`` with the same code.
    ``translate`` turns any other exception into a refusal (the tracker's database
    errors) or returns None to let it through.
    """
    codes = dict(by_name or {})

    def report(exc: Refusal, cause: BaseException) -> None:
        from observe.refusals import debugging

        if debugging():  # ALPHA_DEBUG=1: where it was raised, then the one line, with the same code
            import traceback

            traceback.print_exception(cause, file=sys.stderr)
        click.echo(exc.diagnostics(), err=True)
        code = codes.get(exc.name, exit)
        if exc.name == "resource":
            raise ResourceExit(code)
        sys.exit(code)

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Refusal as exc:
                report(exc, exc)
            except (KeyboardInterrupt, SystemExit, GeneratorExit):
                raise
            except BaseException as exc:  # a Rust extension's panic is a BaseException
                from observe.refusals import resource_refusal

                # the machine's failure: resource, with the command's code
                refusal: Refusal | None = resource_refusal(exc)
                if refusal is None and translate is not None and isinstance(exc, Exception):
                    refusal = translate(exc)
                if refusal is None:
                    raise
                report(refusal, exc)

        return wrapper  # type: ignore[return-value]

    return decorate


# -- one vocabulary: the options every command spells the same way ----------------------
#
# ``-o/--out FILE``         a file the command writes
# ``--key PUBKEY``          the Ed25519 public key a signature is checked against
# ``--sign-key FILE``       the Ed25519 private key the command signs with (a file or a pipe)
# ``--sign-key-env NAME``   the same private key, from environment variable NAME
# ``--db DB``               the tracker (an SQLite file or postgresql://...)
#
# Older spellings (``--output``, ``--tracker``, ``--signing-key``, ``--journal-key``,
# ``--seal-key``) are hidden aliases: they still work, and ``--help`` shows only the above.

#: What each spelling of the vocabulary names (the tests walk every command against it).
VOCABULARY: dict[str, str] = {
    "--out": "a file the command writes",
    "--key": "the public key a signature is checked against",
    "--sign-key": "the private key the command signs with (a file or a pipe)",
    "--sign-key-env": "the private key the command signs with, from an environment variable",
    "--db": "the tracker",
}


class AliasedOption(click.Option):
    """A click option that also answers to older spellings (``aliases``), shown nowhere.

    The parser accepts each alias exactly as the option itself; ``--help``, shell
    completion and the "did you mean" of a mistyped option know only the visible
    spellings. Flags take no aliases (none of the old spellings was one).
    """

    def __init__(self, *args: Any, aliases: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if aliases and self.is_flag:
            raise TypeError("a flag takes no hidden aliases")
        self.aliases = tuple(aliases)

    def add_to_parser(self, parser: Any, ctx: click.Context) -> None:
        super().add_to_parser(parser, ctx)
        if self.aliases:
            action = "append" if self.multiple else "store"
            parser.add_option(obj=self, opts=self.aliases, dest=self.name, action=action, nargs=self.nargs)


def option(*decls: str, aliases: tuple[str, ...] = (), **kwargs: Any) -> Callable[[F], F]:
    """``click.option`` with hidden ``aliases`` (older spellings that still work)."""
    return click.option(*decls, cls=AliasedOption, aliases=aliases, **kwargs)


def out_option(
    help_text: str, *, required: bool = False, aliases: tuple[str, ...] = (), **kwargs: Any
) -> Callable[[F], F]:
    """``-o/--out FILE`` (``out``): the file the command writes."""
    kwargs.setdefault("metavar", "FILE")
    return option("-o", "--out", "out", required=required, default=None, aliases=aliases, help=help_text, **kwargs)


def public_key_option(help_text: str, *, aliases: tuple[str, ...] = ()) -> Callable[[F], F]:
    """``--key PUBKEY``: the Ed25519 public key (PEM) a signature is checked against.

    The command receives the path (``key``) and loads it with :func:`public_key` where
    its refusal belongs in the order of its checks.
    """
    return option(
        "--key", "key", type=click.Path(dir_okay=False), default=None, metavar="PUBKEY", aliases=aliases, help=help_text
    )


def sign_key_options(what: str, *, aliases: tuple[str, ...] = (), envvar: str | None = None) -> Callable[[F], F]:
    """``--sign-key FILE`` and ``--sign-key-env NAME`` (``sign_key``, ``sign_key_env``): the key that signs ``what``.

    Load it with :func:`signing_key`, which refuses both at once.
    """
    file_option = option(
        "--sign-key",
        "sign_key",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        envvar=envvar,
        metavar="FILE",
        aliases=aliases,
        help=f"Ed25519 private key (PEM) that signs {what}: a file or a pipe such as <(...)"
        + (f" (or ${envvar})." if envvar else "."),
    )
    env_option = click.option(
        "--sign-key-env",
        "sign_key_env",
        default=None,
        metavar="NAME",
        help=f"Sign {what} with the Ed25519 private key (PEM) in environment variable NAME.",
    )

    def decorate(func: F) -> F:
        return file_option(env_option(func))

    return decorate


def db_option(*, aliases: tuple[str, ...] = ()) -> Callable[[F], F]:
    """``--db DB`` (``db``): the tracker, an SQLite file (default ./progress.sqlite3, $ALPHA_TRACKER_DB) or a URL."""
    return option(
        "--db",
        "db",
        default="progress.sqlite3",
        show_default=True,
        envvar=TrackerVars.DB,
        metavar="DB",
        aliases=aliases,
        help="The tracker: an SQLite file (or $ALPHA_TRACKER_DB), or a PostgreSQL database, postgresql://USER@HOST/DB.",
    )


def public_key(path: str | Path | None) -> Verifier | None:
    """Load the Ed25519 public key at ``path`` (None for none); a bad one is refused as ``stream-signature``."""
    if path is None:
        return None
    from aos.signing import load_public_key

    return load_public_key(path)


def private_key(path: str | Path | None) -> Signer | None:
    """Load the Ed25519 private key at ``path`` (None for none); a bad one is refused as ``stream-signature``."""
    if path is None:
        return None
    from aos.signing import load_signer

    return load_signer(path)


def signing_key(path: str | Path | None, env_name: str | None) -> Signer | None:
    """The private key of ``--sign-key FILE`` or ``--sign-key-env NAME`` (None for neither).

    Both at once is a usage error; an unset or empty variable, or a bad key, is refused as ``stream-signature``.
    """
    if path is not None and env_name is not None:
        raise click.UsageError("give the signing key once: --sign-key FILE or --sign-key-env NAME")
    if env_name is None:
        return private_key(path)
    import os

    from aos.refusals import StreamSignature
    from aos.signing import signer_from_pem

    pem = os.environ.get(env_name, "")
    if not pem.strip():
        raise StreamSignature(f"--sign-key-env {env_name}: the variable is not set or empty")
    return signer_from_pem(pem.encode("utf-8", "surrogateescape"), f"from ${env_name}")


def gate_file_option(help_text: str) -> Callable[[F], F]:
    """``--gate-file FILE`` (repeatable, ``gate_files``), as every command that resolves gates takes it."""
    return click.option(
        "--gate-file",
        "gate_files",
        multiple=True,
        type=click.Path(dir_okay=False, path_type=Path),
        metavar="FILE",
        help=help_text,
    )


def json_option(help_text: str) -> Callable[[F], F]:
    """``--json`` (``as_json``): print one JSON document instead of text."""
    return click.option("--json", "as_json", is_flag=True, default=False, help=help_text)


# -- the recording options (record, gate) ---------------------------------------------


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
                takes_value.update(p.opts, getattr(p, "aliases", ()))
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


#: ``--sign-key FILE`` and ``--sign-key-env NAME``: the private key that signs checkpoints and the seal
#: (at most one of them: ``options_from_click`` says so as a usage error).
_SIGN_KEY_OPTIONS = [
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
]

#: ``--observer-key-env NAME`` and ``--observer-key FILE``: the private key the recorder logs into the lane's
#: nodes' observer accounts with (at most one of them; the lane config never names it).
_OBSERVER_KEY_OPTIONS = [
    click.option(
        "--observer-key-env",
        default=None,
        metavar="NAME",
        help="Log into each node's observer account with the SSH private key in environment variable NAME, "
        "which is removed from the command's environment: the command never sees the key.",
    ),
    click.option(
        "--observer-key",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        metavar="FILE",
        help="Log into each node's observer account with this SSH private key file (recorded as key: file; the "
        "command, running as you, can read it: a node observed so is never physical evidence).",
    ),
]


def observer_key_options(func: F) -> F:
    """``--observer-key-env NAME`` and ``--observer-key FILE`` (``observer_key_env``, ``observer_key``), as
    ``record`` and ``gate`` take them (``alpha observe nodes check`` too)."""
    for decorate in reversed(_OBSERVER_KEY_OPTIONS):
        func = decorate(func)
    return func


def recording_options(func: F) -> F:
    """Add the recording options that ``record`` and ``gate`` share."""
    options = [
        click.option(
            "-o",
            "--out",
            "out",
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
        *_SIGN_KEY_OPTIONS,
        *_OBSERVER_KEY_OPTIONS,
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

    The writer builds Arrow arrays from Python lists only, and ``read`` reads Arrow
    buffers and builds its lines with Arrow's kernels; numpy is a third of pyarrow's
    import time, which is most of ``record -- true``'s start-up and of ``read --json``
    of a small stream. Only for CLI processes that record or ``read``: never call it in
    a process that needs numpy.
    """
    if "numpy" not in sys.modules and "pyarrow" not in sys.modules:
        sys.modules["numpy"] = None  # type: ignore[assignment]


def one_blas_thread() -> None:
    """Hold OpenBLAS (which numpy loads with pyarrow) to one thread in a command that reads streams.

    On a machine that cannot start threads OpenBLAS raises SIGINT in its own process when it
    loads, so a reader would end as if interrupted, not ``refused: resource``; it needs no
    threads of its own here. Not for a command that runs another (``record``, ``gate``: they
    keep numpy out instead, :func:`without_numpy`): the variable would reach it.
    """
    from observe.env import RecorderVars

    if "numpy" not in sys.modules:  # it reads the variable once, as it loads
        os.environ.setdefault(RecorderVars.BLAS_THREADS, "1")


def options_from_click(**kwargs: Any) -> RecordOptions:
    """The ``RecordOptions`` for the parameters ``recording_options`` added (others are ignored)."""
    from observe.recorder.record import RecordOptions
    from observe.secrets.sources import mask_file_values

    labels = kwargs.get("label") or {}
    if not isinstance(labels, dict):  # called with raw K=V strings
        labels = _parse_label(None, None, tuple(labels))  # type: ignore[arg-type]
    if kwargs.get("sign_key") is not None and kwargs.get("sign_key_env") is not None:
        raise click.UsageError("give the signing key once: --sign-key FILE or --sign-key-env NAME")
    observer_key_env = kwargs.get("observer_key_env")
    if observer_key_env is not None and kwargs.get("observer_key") is not None:
        raise click.UsageError("give the observer key once: --observer-key-env NAME or --observer-key FILE")
    if observer_key_env is not None and not os.environ.get(observer_key_env, "").strip():
        raise click.BadParameter(
            f"{observer_key_env}: the variable is not set or empty", param_hint="--observer-key-env"
        )
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
        observer_key=kwargs.get("observer_key"),
        observer_key_env=observer_key_env,
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
