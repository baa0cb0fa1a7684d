"""Recording a command as an AOS stream: the library entry point behind ``alpha observe record``.

    result = record(["make", "test"], RecordOptions(out=Path("run.aos")))

The stream holds, in order: ``stream.open``; ``process.start``; the command's
output (``stdout``/``stderr``), receipts, steps and artifacts it sent through the
channel, as they happened; ``process.exit``; anything stray background writers
produced after that; the ``--artifact`` captures; whatever ``before_seal`` adds
(a gate's verdict); the ``seal``.

Tuning by environment (for tests and benchmarks; the defaults suit CI):
``ALPHA_OBSERVE_KILL_GRACE`` (seconds from ``--timeout``'s SIGTERM to SIGKILL,
default 5), ``ALPHA_OBSERVE_DRAIN`` (seconds stray background writers are still
recorded after the command exits, default 2), ``ALPHA_OBSERVE_ZSTD_LEVEL``
(the stream's zstd level, default 1; -1 records ~15% faster into ~35% larger
streams), ``ALPHA_OBSERVE_ENCODERS`` (threads compressing batches, 1 to 64;
default one per core, 2 to 4: ``aos.writer.default_encoders``; each adds about
2 MiB to the peak RSS).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos.text import printable, text_key, text_value
from observe.channel.protocol import ENV_STDERR_ID, ENV_STDOUT_ID, ENV_STEP, ENV_STREAM, ENV_STREAM_ID
from observe.exits import Exit
from observe.recorder import artifacts
from observe.recorder.sinks import Echo, logger
from observe.recorder.spawn import become_subreaper, children_of
from observe.secrets.envpolicy import recorded_env
from observe.secrets.masking import SecretSet, mask_text
from observe.secrets.sources import MaskingSink, secrets_for_recording

if TYPE_CHECKING:
    from aos.signing import Signer
    from aos.writer import SealInfo, StreamWriter
    from observe.recorder.control import Control
    from observe.recorder.sampler import ObserverOpening, Sampler

__all__ = [
    "DEFAULT_DIR",
    "ENV_ALPHA",
    "BeforeSeal",
    "RecordOptions",
    "RecordResult",
    "alpha_shim",
    "default_out",
    "record",
]

#: The path of the recorder's own ``alpha`` (a shim), exported to the command.
ENV_ALPHA = "AOS_ALPHA"

#: Seconds between ``--timeout``'s SIGTERM and the SIGKILL that follows
#: (``ALPHA_OBSERVE_KILL_GRACE`` overrides).
KILL_GRACE = 5.0
#: Seconds the output of stray background writers is still recorded after the
#: command exits (``ALPHA_OBSERVE_DRAIN`` overrides).
DRAIN_SECONDS = 2.0

TOOL = "alpha-observe"


@dataclass(frozen=True)
class RecordOptions:
    """The recording options shared by ``record`` and ``gate``."""

    out: Path | None = None
    artifacts: tuple[str, ...] = ()
    timeout: float | None = None
    pty: bool = False
    sign_key: Path | None = None
    #: The private key's PEM in this environment variable, which the command never sees (``--sign-key-env``).
    sign_key_env: str | None = None
    masks: tuple[str, ...] = ()
    mask_env: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    quiet: bool = False
    artifact_max_bytes: int | None = None
    gate: str | None = None
    observe_devices: str = "auto"  # auto | nvml | off
    sample_interval: float = 1.0
    echo_to_stderr: bool = False  # the command's stdout echoed on stderr (``--json`` keeps stdout one document)


@dataclass(frozen=True)
class RecordResult:
    """What happened, and the exit code ``alpha observe record`` exits with."""

    path: Path
    stream_id: str
    exit_code: int
    command_exit: int | None
    signal: str | None
    timed_out: bool
    recorder_failed: bool
    seal: SealInfo | None


#: Called with the writer after everything is recorded, before the seal: it may
#: read back what the writer wrote (``writer.written_events()``) and append.
BeforeSeal = Callable[["StreamWriter"], None]


def _version() -> str:
    """The installed alpha-observe version (a cheap dist-info scan; importlib.metadata as fallback)."""
    import glob

    for entry in sys.path:
        for found in glob.glob(os.path.join(glob.escape(entry or "."), "alpha_observe-*.dist-info")):
            return os.path.basename(found)[len("alpha_observe-") : -len(".dist-info")]
    try:
        from importlib.metadata import version

        return version(TOOL)
    except Exception:  # noqa: BLE001 - a missing dist-info must not stop a recording
        return "unknown"


#: Where streams go without ``--out`` (not hidden: CI artifact uploaders skip hidden folders).
DEFAULT_DIR = "aos-streams"


def default_out(cwd: str, stream_id: str) -> Path:
    """``./aos-streams/<UTC time>-<stream id>.aos`` (the directory is created).

    Raises ``aos.refusals.StreamWrite`` when it cannot be (``./aos-streams`` is a file, ...).
    """
    from aos.refusals import StreamWrite

    directory = Path(cwd) / DEFAULT_DIR
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StreamWrite(f"cannot create the stream folder {directory}: {exc.strerror or exc}") from exc
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    return directory / f"{stamp}-{stream_id}.aos"


def _channel_dir() -> str:
    """A private directory for the channel; short enough for a Unix socket path (108 bytes)."""
    directory = tempfile.mkdtemp(prefix="aos-")
    if len(os.fsencode(directory)) > 90:  # a long TMPDIR: fall back to /tmp
        os.rmdir(directory)
        directory = tempfile.mkdtemp(prefix="aos-", dir="/tmp")
    return directory


def _float_env(name: str, default: float, *, low: float = 0.0, high: float = 86400.0) -> float:
    """A tuning variable's value; anything else than a number in ``[low, high]`` is ignored, with a warning."""
    import math

    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not low <= value <= high:
        logger().warning("ignoring a bad tuning variable", variable=name, value=raw[:40], using=default)
        return default
    return value


def _zstd_level() -> int:
    """``ALPHA_OBSERVE_ZSTD_LEVEL``: an integer from -7 to 22 (zstd's fast and normal levels), else 1."""
    level = _float_env("ALPHA_OBSERVE_ZSTD_LEVEL", 1, low=-7, high=22)
    if level != int(level):
        logger().warning("ignoring a bad tuning variable", variable="ALPHA_OBSERVE_ZSTD_LEVEL", using=1)
        return 1
    return int(level)


def _encoders() -> int | None:
    """``ALPHA_OBSERVE_ENCODERS``: an integer from 1 to 64, else None (one per core: the writer's default)."""
    if not os.environ.get("ALPHA_OBSERVE_ENCODERS", "").strip():
        return None
    count = _float_env("ALPHA_OBSERVE_ENCODERS", 0, low=1, high=64)
    if count != int(count) or count < 1:
        if count:
            logger().warning("ignoring a bad tuning variable", variable="ALPHA_OBSERVE_ENCODERS", using="default")
        return None
    return int(count)


def _lean_memory() -> None:
    """Keep the recorder's memory small, flat in the stream's size, and its pages reused.

    Arrow's buffers come from the system allocator, like Python's: pyarrow's own
    (mimalloc or jemalloc) keeps freed batches beside glibc's free memory, ~15-25 MB
    more peak RSS. glibc is asked to keep what is freed (no trimming, no ``mmap``
    for chunks below 16 MiB, at most 4 arenas), so each batch reuses the pages of
    the one before instead of faulting fresh ones in (page faults are dear under
    gVisor); what is in flight is bounded (aos.writer, observe.recorder.sinks.Sink), so
    what is kept is too. The recorded command is exec'd: none of this reaches it.
    """
    # Arrow picks its default pool once, from ARROW_DEFAULT_MEMORY_POOL, when it is first
    # used: set it only for that moment (the command's environment is the recorder's own).
    # Switching pools later (set_memory_pool) leaves the first pool's reservations: ~20 MB.
    saved = os.environ.get("ARROW_DEFAULT_MEMORY_POOL")
    os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "system"
    try:
        import pyarrow as pa

        try:
            if pa.default_memory_pool().backend_name != "system":  # pyarrow was in use already
                pa.set_memory_pool(pa.system_memory_pool())
        except (NotImplementedError, AttributeError, pa.ArrowException):
            pass
    finally:
        if saved is None:
            del os.environ["ARROW_DEFAULT_MEMORY_POOL"]
        else:
            os.environ["ARROW_DEFAULT_MEMORY_POOL"] = saved
    from observe.util.allocator import keep_freed_memory

    keep_freed_memory()


def _not_dumpable() -> None:
    """Keep the recorded command (same user, not root) out of the recorder's memory and
    descriptors: no ptrace attach, no ``/proc/PID/mem``, no ``/proc/PID/fd`` (Linux's
    ``PR_SET_DUMPABLE`` 0; the command's own processes are dumpable again after exec)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):  # pragma: no cover - no prctl: nothing more to do
        pass


def record(argv: Sequence[str], options: RecordOptions, *, before_seal: BeforeSeal | None = None) -> RecordResult:
    """Run ``argv`` and record it as a sealed AOS stream.

    Problems of the command (not found, cannot execute, killed, timed out) are
    never exceptions: they are exit codes, recorded in the stream. Only a
    recording that cannot *start* raises, before the command runs:
    ``observe.refusals.OutExists`` when ``--out`` exists (the CLI exits 2: the
    caller's choice, as a usage error), ``aos.refusals.StreamWrite`` when it
    cannot be created otherwise (its directory does not exist, ...),
    ``aos.refusals.StreamSignature`` when the signing key cannot be loaded. The
    CLI prints ``refused: NAME: detail`` and exits 125 for those two. A write
    failure after the start (a full disk) never stops the command or its echo;
    it ends in ``exit_code`` 125 with ``recorder_failed`` set.

    ``before_seal(writer)`` runs after everything is recorded and before
    the seal; ``writer.written_events()`` gives it exactly the events appended
    (from the writer's private copy, never the file at ``path``, which the
    command could have replaced). If it raises, a ``recorder.error`` event
    records why, the stream is still sealed and the result is a recorder
    failure (125).
    """
    opening = None
    if options.observe_devices != "off":
        from observe.recorder.sampler import ObserverOpening

        opening = ObserverOpening(options.observe_devices, os.environ)  # NVML loads while the rest starts
    try:
        return _record(argv, options, before_seal, opening)
    finally:
        if opening is not None:
            opening.release()  # closed here when no sampler took it (a refused --out, a bad key, a crash)


def _record(
    argv: Sequence[str], options: RecordOptions, before_seal: BeforeSeal | None, opening: ObserverOpening | None
) -> RecordResult:
    from aos.refusals import StreamWrite
    from aos.writer import StreamWriter, new_stream_id
    from observe.refusals import OutExists

    _lean_memory()
    _not_dumpable()
    argv = list(argv)
    cwd = os.getcwd()
    stream_id = new_stream_id()
    signer, key_pem = _signer(options)
    path = Path(options.out) if options.out is not None else default_out(cwd, stream_id)
    masks = (*options.masks, key_pem) if key_pem else options.masks
    secrets, unset = secrets_for_recording(command_environ(options), masks=masks, mask_env=options.mask_env)
    for name in unset:
        logger().warning("--mask-env names a variable that is not set: nothing to mask", name=name)
    try:
        writer = StreamWriter(
            path,
            stream_id=stream_id,
            signer=signer,
            compression_level=_zstd_level(),
            pipelined=True,  # compression on one thread per core (aos.writer.default_encoders)
            encoders=_encoders(),
            batch_max_bytes=1 << 20,  # about one output event a batch: (encoders + 2) MiB in flight at most
            keep_copy=before_seal is not None,
        )
    except StreamWrite as exc:
        if isinstance(exc.__cause__, FileExistsError):  # the writer's O_EXCL: the check and the create are one
            raise OutExists(
                f"{path} exists: a stream is never overwritten (remove it, or choose another --out)"
            ) from exc
        raise
    sink = MaskingSink(writer, secrets)
    from observe.ci.systems import markers_for

    fds = {"stdout": 2, "stderr": 2} if options.echo_to_stderr else None
    echo = Echo(not options.quiet, fds, markers=markers_for(os.environ))
    channel_dir = _channel_dir()
    restore_reaper = become_subreaper()
    try:
        crashed = False
        try:
            outcome = _run(argv, options, path, stream_id, cwd, sink, echo, secrets, channel_dir, opening)
        except Exception as exc:  # noqa: BLE001 - a recorder bug still ends in a sealed stream and 125
            from observe.recorder.capture import Outcome

            crashed = True
            outcome = Outcome()
            logger().error("the recorder failed", error=mask_text(f"{type(exc).__name__}: {exc}", secrets))
            sink.append("recorder.error", {"error": printable(f"the recorder failed: {type(exc).__name__}: {exc}")})
        failed_hook = crashed
        sink.stop()  # everything queued is in the writer now
        if before_seal is not None and not sink.failed:
            try:
                before_seal(writer)
            except Exception as exc:  # noqa: BLE001 - any failure of the hook is recorded, then sealed
                failed_hook = True
                error = printable(f"before_seal failed: {type(exc).__name__}: {exc}")
                sink.append_direct("recorder.error", {"error": error})
        seal = sink.seal()
    finally:
        restore_reaper()
        sink.stop()
        writer.close()
        shutil.rmtree(channel_dir, ignore_errors=True)
    failed = sink.failed or failed_hook or seal is None
    if options.out is None:
        sys.stderr.write(f"alpha observe: stream {path}\n")
        sys.stderr.flush()
    timed_out = outcome.timed_out or outcome.capture_timed_out
    code = Exit.RECORDER if failed else (Exit.TIMEOUT if timed_out else outcome.shell_code)
    return RecordResult(
        path=path,
        stream_id=stream_id,
        exit_code=code,
        command_exit=outcome.exit_code,
        signal=outcome.signal,
        timed_out=timed_out,
        recorder_failed=failed,
        seal=seal,
    )


def _signer(options: RecordOptions) -> tuple[Signer | None, str | None]:
    """The seal's signer (None without a key) and, from ``--sign-key-env``, the key's PEM text (masked too).

    A key file is readable by the recorded command, which runs as the same user: said on stderr, since a
    command that reads it can sign a forgery of its own. From a pipe or the environment it never sees it.
    """
    if options.sign_key is None and options.sign_key_env is None:
        return None, None
    from aos.refusals import StreamSignature
    from aos.signing import load_signer, signer_from_pem  # cryptography: only when signing

    if options.sign_key_env is not None:
        pem = os.environ.get(options.sign_key_env, "")
        if not pem.strip():
            raise StreamSignature(f"--sign-key-env {options.sign_key_env}: the variable is not set or empty")
        return signer_from_pem(pem.encode("utf-8", "surrogateescape"), f"from ${options.sign_key_env}"), pem
    assert options.sign_key is not None
    signer = load_signer(options.sign_key)
    with contextlib.suppress(OSError):
        if stat.S_ISREG(os.stat(options.sign_key).st_mode):
            logger().warning(
                "the signing key is a file the recorded command can read (it runs as you), and with it sign a "
                "stream of its own; --sign-key-env NAME or a pipe (--sign-key <(...)) keep the key from it",
                key=str(options.sign_key),
            )
    return signer, None


def command_environ(options: RecordOptions) -> dict[str, str]:
    """The recorder's environment less what the command must never see (the ``--sign-key-env`` variable)."""
    env = dict(os.environ)
    if options.sign_key_env is not None:
        env.pop(options.sign_key_env, None)
    return env


def _argv_text(values: Sequence[str], secrets: SecretSet) -> list[str | dict[str, str]]:
    """An argv, masked, as byte text (FORMAT.md 3.7): an item that is not UTF-8 is ``{"bytes_b64": ...}``."""
    return [text_value(mask_text(v, secrets)) for v in values]


def _run(
    argv: list[str],
    options: RecordOptions,
    path: Path,
    stream_id: str,
    cwd: str,
    sink: MaskingSink,
    echo: Echo,
    secrets: SecretSet,
    channel_dir: str,
    opening: ObserverOpening | None = None,
) -> Any:
    from observe.recorder.control import Control

    sink.append(
        "stream.open",
        {
            "stream_id": stream_id,
            "tool": TOOL,
            "version": _version(),
            "argv": _argv_text(argv, secrets),
            "recorder_argv": _argv_text(sys.argv, secrets),
            "cwd": text_value(cwd),
            # names always, values on the allow-list; the sink masks every event's attrs (byte text included)
            "env": {text_key(k): text_value(v) for k, v in recorded_env(command_environ(options), options.env).items()},
            "host": text_value(socket.gethostname()),
            "gate": options.gate,
            "labels": {
                text_key(str(k)): text_value(mask_text(str(v), secrets)) for k, v in dict(options.labels).items()
            },
            "pid": os.getpid(),
            "pty": options.pty,
            "timeout": options.timeout,
            "observe_devices": options.observe_devices,
            "sample_interval_ns": int(options.sample_interval * 1e9),
        },
    )
    control = Control(
        channel_dir,
        sink,
        echo,
        secrets,
        cwd=cwd,
        artifact_max_bytes=options.artifact_max_bytes,
        drain=lambda: None,
    )
    sampler = _start_sampler(options, sink, control, secrets, opening)
    try:
        outcome, started_ns = _run_command(argv, options, path, stream_id, cwd, sink, echo, secrets, control, sampler)
    finally:
        if sampler is not None:
            sampler.finish()  # a no-op after the end observation, which follows process.exit
    control.finish_receipts()
    if options.artifacts:
        _final_artifacts(options, cwd, sink, outcome, started_ns, secrets)
    control.finish_receipts()
    control.close()
    echo.close_folds()
    return outcome


def _start_sampler(
    options: RecordOptions,
    sink: MaskingSink,
    control: Control,
    secrets: SecretSet,
    opening: ObserverOpening | None = None,
) -> Sampler | None:
    """The device and process-tree sampler (None with ``--observe-devices off``), started now, with the
    observer ``opening`` began to open at the recording's start."""
    if options.observe_devices == "off":
        return None
    from observe.recorder.sampler import Sampler

    sampler = Sampler(
        sink,
        mode=options.observe_devices,
        interval=options.sample_interval,
        env=os.environ,
        open_steps=control.open_steps,
        mask=lambda text: mask_text(text, secrets),
        opening=opening,
    )
    sampler.start()
    return sampler


def alpha_shim(directory: str) -> str:
    """Write ``DIRECTORY/bin/alpha``: this recorder's own ``alpha`` (same interpreter, same modules).

    A command started by full path outside a virtualenv (``/venv/bin/alpha observe
    gate ...`` with no ``alpha`` on ``PATH``) still finds ``alpha observe step``,
    and never a different version of the tool: the shim runs ``sys.executable``
    isolated (``-I``: no ``PYTHONPATH``, no current directory on the path) with
    exactly this process's module path.
    """
    import shlex

    bin_dir = os.path.join(directory, "bin")
    os.makedirs(bin_dir, mode=0o700, exist_ok=True)
    # "" (the current directory) and relative folders as absolute paths; other entries (a path hook's
    # key, such as an editable install's "__editable__...__path_hook__") exactly as they are
    paths = [os.getcwd() if not p else os.path.abspath(p) if os.path.isdir(p) else p for p in sys.path]
    code = f"import sys; sys.argv[0] = 'alpha'; sys.path[:] = {paths!a}; from observe.cli.entry import main; main()"
    python = os.fsencode(sys.executable or "python3")
    script = b"#!/bin/sh\nexec " + shlex.quote(os.fsdecode(python)).encode("utf-8", "surrogateescape")
    script += b" -I -c " + shlex.quote(code).encode("ascii") + b' "$@"\n'
    shim = os.path.join(bin_dir, "alpha")
    fd = os.open(shim, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o700)
    try:
        os.write(fd, script)
    finally:
        os.close(fd)
    return shim


def _put_alpha_first(env: dict[str, str], directory: str) -> None:
    """The command finds this recorder's ``alpha`` first on ``PATH``, and its path in ``$AOS_ALPHA``."""
    try:
        shim = alpha_shim(directory)
    except OSError as exc:  # pragma: no cover - the channel directory was just made, private
        logger().warning("cannot write the alpha shim; nested alpha resolves from PATH", error=str(exc))
        return
    env[ENV_ALPHA] = shim
    env["PATH"] = os.path.dirname(shim) + (os.pathsep + env["PATH"] if env.get("PATH") else "")


def _capture_lane_configs(sink: MaskingSink, cwd: str, max_bytes: int | None, secrets: SecretSet) -> None:
    """Capture each ``ALPHA_*_DEVICE_CONFIG`` file named in the recorder's environment, before the command runs.

    These artifacts alone carry ``origin: "recorder"`` (and ``env``): the control
    channel refuses both keys, so a command cannot pass its own copy off as this one.
    """
    from observe.devices.observers import lane_configs

    for name, value in lane_configs(os.environ):
        artifacts.capture_file(
            lambda kind, attrs, data, step: sink.append(kind, attrs, data, step),
            os.path.realpath(os.path.join(cwd, value)),
            cwd=cwd,
            max_bytes=max_bytes,
            attrs={"origin": "recorder", "env": name},
            secrets=secrets,
        )


def _run_command(
    argv: list[str],
    options: RecordOptions,
    path: Path,
    stream_id: str,
    cwd: str,
    sink: MaskingSink,
    echo: Echo,
    secrets: SecretSet,
    control: Control,
    sampler: Sampler | None,
) -> tuple[Any, int]:
    """Capture the lane configs, append the start observation, run the command; return its outcome
    and when it started (``time.monotonic_ns``)."""
    from observe.recorder.capture import Capture, Outcome
    from observe.recorder.spawn import SpawnFailure, spawn

    _capture_lane_configs(sink, cwd, options.artifact_max_bytes, secrets)
    if sampler is not None:
        start = sampler.take_start()
        if start is not None:
            sink.append("device.observed", start)
    env = command_environ(options)
    for name in (ENV_STEP, ENV_STDOUT_ID, ENV_STDERR_ID):
        env.pop(name, None)
    env.update(control.env())
    _put_alpha_first(env, control.directory)
    env[ENV_STREAM] = str(path.resolve())
    env[ENV_STREAM_ID] = stream_id
    not_ours = frozenset(children_of(os.getpid()))  # a library caller's own children are not the command's
    started_ns = time.monotonic_ns()
    spawned = spawn(argv, env, pty=options.pty)
    if isinstance(spawned, SpawnFailure):
        outcome = Outcome(exit_code=spawned.exit_code, shell_code=spawned.exit_code)
        sink.append(
            "process.exit",
            {
                "exit_code": spawned.exit_code,
                "signal": None,
                "timed_out": False,
                "duration_ns": time.monotonic_ns() - started_ns,
                "rusage": None,
                "interrupted": None,
                "stray_writers": False,
                "error": printable(mask_text(spawned.error, secrets)),
            },
        )
        if not options.quiet:
            sys.stderr.write(f"alpha observe: {mask_text(spawned.error, secrets)}\n")
    else:
        sink.append("process.start", {"pid": spawned.pid, "argv": _argv_text(argv, secrets)})
        if sampler is not None:
            sampler.command_started(spawned.pid)
        capture = Capture(
            spawned,
            sink,
            echo,
            control,
            secrets,
            timeout=options.timeout,
            kill_grace=_float_env("ALPHA_OBSERVE_KILL_GRACE", KILL_GRACE),
            drain_seconds=_float_env("ALPHA_OBSERVE_DRAIN", DRAIN_SECONDS),
            started_ns=started_ns,
            not_ours=not_ours,
        )
        try:
            outcome = capture.run()
        finally:
            if spawned.give_back_terminal is not None:
                spawned.give_back_terminal()
        if outcome.timed_out:
            logger().warning("command timed out; its process group was stopped", timeout=options.timeout)
        if outcome.stray:
            logger().warning(
                "background processes still hold the command's output; stopped waiting for them",
                still_open=",".join(outcome.stray),
            )
        if outcome.stray or outcome.ended:
            sink.append(
                "process.stray",
                {
                    "still_open": outcome.stray,
                    "drained_ns": int(_float_env("ALPHA_OBSERVE_DRAIN", DRAIN_SECONDS) * 1e9),
                    "ended": [
                        {"pid": p["pid"], "argv": _argv_text(p["argv"], secrets), "signal": p["signal"]}
                        for p in outcome.ended
                    ],
                },
            )
        if outcome.late_interrupt:
            sink.append("recorder.interrupted", {"signal": outcome.late_interrupt})
    return outcome, started_ns


def _final_artifacts(
    options: RecordOptions, cwd: str, sink: MaskingSink, outcome: Any, started_ns: int, secrets: SecretSet
) -> None:
    """The ``--artifact`` captures, bounded by ``--timeout`` (counted from the command's start) and by
    SIGINT/SIGTERM/SIGHUP, which end the capture where it is; the stream is sealed either way."""
    import signal
    import threading

    deadline = started_ns / 1e9 + options.timeout if options.timeout is not None else None
    caught: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        caught.append(signal.Signals(signum).name)

    def stop() -> bool:
        if deadline is not None and time.monotonic() >= deadline:
            outcome.capture_timed_out = not outcome.timed_out
            return True
        return bool(caught)

    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        artifacts.capture(
            lambda kind, attrs, data, step: sink.append(kind, attrs, data, step),
            options.artifacts,
            cwd=cwd,
            max_bytes=options.artifact_max_bytes,
            secrets=secrets,
            stop=stop,
        )
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if caught:
        sink.append("recorder.interrupted", {"signal": caught[0]})
