"""Recording a command as an AOS stream: the library entry point behind ``alpha observe record``.

    result = record(["make", "test"], RecordOptions(out=Path("run.aos")))

The stream holds, in order: ``stream.open``; ``process.start``; the command's
output (``stdout``/``stderr``), receipts, steps and artifacts it sent through the
channel, as they happened; ``process.exit``; anything stray background writers
produced after that; the ``--artifact`` captures; whatever ``before_seal`` adds
(a gate's verdict); the ``seal``.

A recording goes through three stages, handing on one ``Recording``:
``_open_stream`` (the writer, the secrets, the echo, the channel's folder: the
only stage that can refuse), ``observe.recorder.run.run_recorded``
(``stream.open``, the control server and the sampler, the command, the
``--artifact`` captures) and ``_seal``. The values a recording is made of are
in ``observe.recorder.recording``; the environment variables that tune it are
read in ``observe.recorder.tuning``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from aos import kinds
from aos.text import printable
from observe.exits import Exit
from observe.recorder import outpath, tuning
from observe.recorder.preload import import_own_modules
from observe.recorder.recording import (
    DEFAULT_DIR,
    BeforeSeal,
    Recording,
    RecordOptions,
    RecordResult,
    command_environ,
    observer_key,
)
from observe.recorder.run import run_recorded
from observe.recorder.sinks import Echo, logger
from observe.recorder.spawn import become_subreaper
from observe.secrets.masking import mask_text
from observe.secrets.sources import MaskingSink, secrets_for_recording

if TYPE_CHECKING:
    from aos.signing import Signer
    from aos.writer import SealInfo
    from observe.recorder.capture import Outcome
    from observe.recorder.sampler import ObserverOpening

__all__ = [
    "DEFAULT_DIR",
    "BeforeSeal",
    "RecordOptions",
    "RecordResult",
    "default_out",
    "record",
]


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

    When the recording ends, the file at the path must be the one the writer
    wrote; if the command replaced, edited or removed it, the recorder puts its
    stream back from its private copy, keeps what was there as ``PATH.foreign-N``,
    says so on stderr and exits 123 (``path_restored``; ``observe.recorder.outpath``).

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
        recording = _open_stream(argv, options, opening, reads_back=before_seal is not None)
        try:
            return _record_and_seal(recording, before_seal)
        finally:
            recording.echo.close_progress()  # the status line never outlives the recording
    finally:
        if opening is not None:
            opening.release()  # closed here when no sampler took it (a refused --out, a bad key, a crash)


def _open_stream(
    argv: Sequence[str], options: RecordOptions, opening: ObserverOpening | None, *, reads_back: bool = False
) -> Recording:
    """Open the stream and what writes to it: the only stage that refuses (``--out``, the signing key).

    The writer keeps a private copy of what it writes: ``before_seal`` reads it back (``reads_back``: with
    pyarrow, whose memory is set up now), and the path is checked against it (and the stream put back from
    it) when the recording ends (observe.recorder.outpath).
    """
    from aos.refusals import StreamWrite
    from aos.writer import StreamWriter, new_stream_id
    from observe.refusals import OutExists

    tuning.lean_memory(arrow=reads_back)
    _not_dumpable()
    cwd = os.getcwd()
    stream_id = new_stream_id()
    signer, key_pem = _signer(options)
    node_key = observer_key(options)
    if signer is not None or node_key is not None:
        # the recorder holds a key all run: nothing of the tool is first read from disk after the command
        # could write it (observe.recorder.preload)
        import_own_modules()
    path = Path(options.out) if options.out is not None else default_out(cwd, stream_id)
    masks = (*options.masks, key_pem) if key_pem else options.masks
    if node_key is not None and node_key[2].strip():
        masks = (*masks, node_key[2])
    secrets, unset = secrets_for_recording(command_environ(options), masks=masks, mask_env=options.mask_env)
    for name in unset:
        logger().warning("--mask-env names a variable that is not set: nothing to mask", name=name)
    try:
        writer = StreamWriter(
            path,
            stream_id=stream_id,
            signer=signer,
            compression_level=tuning.zstd_level(),
            pipelined=True,  # compression on one thread per core (aos.writer.default_encoders)
            encoders=tuning.encoders(),
            batch_max_bytes=1 << 20,  # about one output event a batch: (encoders + 2) MiB in flight at most
            keep_copy=True,
        )
    except StreamWrite as exc:
        # the writer's O_EXCL: the check and the create are one. A folder at the path is no stream
        # that would be overwritten: it is a path that cannot be written (stream-write, 125).
        if isinstance(exc.__cause__, FileExistsError) and not os.path.isdir(path):
            raise OutExists(
                f"{path} exists: a stream is never overwritten (remove it, or choose another --out)"
            ) from exc
        raise
    sink = MaskingSink(writer, secrets)
    from observe.ci.systems import markers_for

    fds = {"stdout": 2, "stderr": 2} if options.echo_to_stderr else None
    progress = None
    if not options.quiet and os.isatty(2):  # a status line on a terminal only
        from observe.recorder.progress import for_terminal

        progress = for_terminal(2, os.environ)
    echo = Echo(
        not options.quiet,
        fds,
        markers=markers_for(os.environ),
        progress=progress,
        expected_refusals=frozenset(options.expected_refusals),
    )
    return Recording(
        argv=list(argv),
        options=options,
        path=path,
        stream_id=stream_id,
        cwd=cwd,
        writer=writer,
        sink=sink,
        echo=echo,
        secrets=secrets,
        channel_dir=_channel_dir(),
        observer_opening=opening,
        observer_key=node_key,
    )


def _record_and_seal(rec: Recording, before_seal: BeforeSeal | None) -> RecordResult:
    """Run the recording to its seal as this process's subreaper, then close and clean up whatever happened."""
    restore_reaper = become_subreaper()
    held = None
    try:
        outcome, crashed = _run_guarded(rec)
        with _sealing_through_signals():
            held = outpath.hold(rec.writer)  # the private copy, kept past the seal for the check of the path
            seal, hook_failed = _seal(rec, before_seal)
    finally:
        restore_reaper()
        rec.sink.stop()
        rec.writer.close()
        shutil.rmtree(rec.channel_dir, ignore_errors=True)
    kept = outpath.keep(held, sealed=seal is not None) if held is not None else None
    if rec.options.out is None:
        sys.stderr.write(f"alpha observe: stream {rec.path}\n")
        sys.stderr.flush()
    failed = rec.sink.failed or crashed or hook_failed or seal is None or (kept is not None and kept.failed)
    return _result(rec, outcome, seal, failed=failed, kept=kept)


@contextlib.contextmanager
def _sealing_through_signals() -> Iterator[None]:
    """While the gate is judged and the stream sealed, SIGINT, SIGTERM and SIGHUP wait (a second Ctrl-C must not
    leave the stream unsealed, nor print a traceback): the command has ended, the seal is bounded work."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, lambda _signum, _frame: None) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_guarded(rec: Recording) -> tuple[Outcome, bool]:
    """``run_recorded``, and whether it crashed: a recorder bug is recorded as ``recorder.error``, never raised."""
    try:
        return run_recorded(rec), False
    except Exception as exc:  # noqa: BLE001 - a recorder bug still ends in a sealed stream and 125
        from observe.recorder.capture import Outcome

        logger().error("the recorder failed", error=mask_text(f"{type(exc).__name__}: {exc}", rec.secrets))
        rec.sink.append(kinds.RECORDER_ERROR, {"error": printable(f"the recorder failed: {type(exc).__name__}: {exc}")})
        return Outcome(), True


def _seal(rec: Recording, before_seal: BeforeSeal | None) -> tuple[SealInfo | None, bool]:
    """Let ``before_seal`` append (a failure of it is a ``recorder.error``), then seal: the seal, and whether the
    hook failed."""
    hook_failed = False
    rec.sink.stop()  # everything queued is in the writer now
    if before_seal is not None and not rec.sink.failed:
        try:
            before_seal(rec.writer)
        except Exception as exc:  # noqa: BLE001 - any failure of the hook is recorded, then sealed
            hook_failed = True
            error = printable(f"before_seal failed: {type(exc).__name__}: {exc}")
            rec.sink.append_direct(kinds.RECORDER_ERROR, {"error": error})
    return rec.sink.seal(), hook_failed


def _result(
    rec: Recording, outcome: Outcome, seal: SealInfo | None, *, failed: bool, kept: outpath.Kept | None
) -> RecordResult:
    """The result and its exit code: 125 when the recorder failed, 123 when it had to put its stream back at the
    path, 124 on a timeout, else the command's."""
    timed_out = outcome.timed_out or outcome.capture_timed_out
    restored = kept is not None and kept.restored
    code = (
        Exit.RECORDER if failed else Exit.RESTORED if restored else (Exit.TIMEOUT if timed_out else outcome.shell_code)
    )
    return RecordResult(
        path=rec.path,
        stream_id=rec.stream_id,
        exit_code=code,
        command_exit=outcome.exit_code,
        signal=outcome.signal,
        timed_out=timed_out,
        recorder_failed=failed,
        seal=seal,
        path_restored=restored,
        foreign=kept.foreign if kept is not None else None,
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
