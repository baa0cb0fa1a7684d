"""A recording's run, between the open stream and the seal: ``stream.open``, the control server and the
sampler, the command from its start to its exit and stray writers, and the ``--artifact`` captures.

Each step appends to the recording's sink, in the order the stream holds them.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aos import kinds
from aos.bounds import LABELS_BUDGET, bounded_list, bounded_mapping
from aos.text import printable, text_key, text_value
from observe.channel.protocol import ENV_STDERR_ID, ENV_STDOUT_ID, ENV_STEP, ENV_STREAM, ENV_STREAM_ID
from observe.recorder import artifacts, source, tuning
from observe.recorder.recording import DEFAULT_DIR, Recording, command_environ
from observe.recorder.shim import put_alpha_first
from observe.recorder.sinks import logger
from observe.recorder.spawn import children_of
from observe.secrets.envpolicy import NOT_RECORDED, recorded_env
from observe.secrets.masking import SecretSet, mask_text

if TYPE_CHECKING:
    from observe.recorder.capture import Outcome
    from observe.recorder.containment import Container, End
    from observe.recorder.control import Control
    from observe.recorder.sampler import Sampler
    from observe.recorder.spawn import Spawned, SpawnFailure

__all__ = ["run_recorded"]

TOOL = "alpha-observe"


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


def _argv_text(values: Sequence[str], secrets: SecretSet) -> list[str | dict[str, str]]:
    """An argv, masked, as byte text (FORMAT.md 3.7) within the event bound (aos.bounds.bounded_list)."""
    return bounded_list(mask_text(v, secrets) for v in values)


def _env_text(env: dict[str, str]) -> dict[str, Any]:
    """The recorded environment as byte text within the event bound (aos.bounds.bounded_mapping); the variables
    whose values are recorded come first, so that those are the last to be left out."""
    ordered = sorted(env.items(), key=lambda kv: (kv[1] == NOT_RECORDED, kv[0]))
    return bounded_mapping({text_key(k): v for k, v in ordered})


def run_recorded(rec: Recording) -> Outcome:
    """Record ``stream.open``, start the control server and the sampler, run the command, then capture the
    ``--artifact`` files; the control server is closed and the CI's folds too before the seal."""
    from observe.recorder.control import Control

    opened = _stream_open(rec)
    rec.sink.append(kinds.STREAM_OPEN, opened)
    for kind, attrs in rec.options.opening:  # a session's expected set, declared before anything runs
        rec.sink.append(kind, dict(attrs))
    _say_dirty(rec, opened["source"])
    control = Control(
        rec.channel_dir,
        rec.sink,
        rec.echo,
        rec.secrets,
        cwd=rec.cwd,
        artifact_max_bytes=rec.options.artifact_max_bytes,
        drain=lambda: None,
    )
    sampler = _start_sampler(rec, control)
    stop_companion = None
    try:
        if rec.options.companion is not None:  # a session's watcher of its members (observe.session.arrivals)
            stop_companion = rec.options.companion(lambda kind, attrs: rec.sink.append(kind, attrs))
        outcome, started_ns = _run_command(rec, control, sampler)
    finally:
        if stop_companion is not None:
            stop_companion()
        if sampler is not None:
            sampler.finish()  # a no-op after the end observation, which follows process.exit
    control.finish_receipts()
    if rec.options.artifacts:
        _final_artifacts(rec, outcome, started_ns)
    control.finish_receipts()
    control.close()
    rec.echo.close_folds()
    return outcome


def _stream_open(rec: Recording) -> dict[str, Any]:
    """The ``stream.open`` event's attrs: what is recorded, where, by which recorder, and how."""
    options, secrets = rec.options, rec.secrets
    return {
        "stream_id": rec.stream_id,
        "tool": TOOL,
        "version": _version(),
        "argv": _argv_text(rec.argv, secrets),
        "recorder_argv": _argv_text(sys.argv, secrets),
        "cwd": text_value(rec.cwd),
        # names always, values on the allow-list; the sink masks every event's attrs (byte text included)
        "env": _env_text(dict(recorded_env(command_environ(options), options.env))),
        "host": text_value(socket.gethostname()),
        # the git commit and tree state, before the command starts; the recorder's own files are not changes
        "source": source.record_source(rec.cwd, own=_own_files(rec)),
        "gate": options.gate,
        "labels": bounded_mapping(
            {text_key(str(k)): mask_text(str(v), secrets) for k, v in dict(options.labels).items()},
            budget=LABELS_BUDGET,
            what="labels",
        ),
        "pid": os.getpid(),
        "pty": options.pty,
        "timeout": options.timeout,
        "observe_devices": options.observe_devices,
        "sample_interval_ns": int(options.sample_interval * 1e9),
        # This recorder observes the remote nodes a captured lane config names (observe.devices.remote).
        "observes_nodes": options.observe_devices != "off",
    }


def _own_files(rec: Recording) -> source.OwnFiles:
    """The recorder's own files in the tree: the stream it writes, the lane configs it captures, and earlier
    streams in its default folder (``DEFAULT_DIR``)."""
    from observe.devices.observers import lane_configs

    files = {os.path.realpath(os.path.join(rec.cwd, value)): f"a lane config the recorder captures ({name})"
             for name, value in lane_configs(os.environ)}  # fmt: skip
    files[os.path.realpath(os.path.join(rec.cwd, rec.path))] = "the stream being written"
    return source.OwnFiles(files, folder=os.path.join(os.path.realpath(rec.cwd), DEFAULT_DIR))


#: The most changed files named on stderr when a device config meets a dirty tree.
_DIRTY_NAMED = 5


def _say_dirty(rec: Recording, src: Any) -> None:
    """With a device config set and a dirty tree, say so on stderr before the lane runs, naming the files:
    a dirty tree leaves ``[[rebuild]]`` inconclusive, so the recording cannot reach scope physical."""
    from observe.devices.observers import lane_configs

    if not isinstance(src, dict) or not src.get("dirty") or not lane_configs(os.environ):
        return
    changes = src.get("changes") or {}
    names = [str(f.get("path")) for f in changes.get("untracked_files", [])]
    more = int(changes.get("untracked", 0)) - len(names[:_DIRTY_NAMED])
    listed = ", ".join(names[:_DIRTY_NAMED]) + (f" and {more} more" if more > 0 and names else "")
    parts = []
    if changes.get("tracked"):
        tracked = source.changed_paths(rec.cwd, _DIRTY_NAMED)
        more_tracked = int(changes["tracked"]) - len(tracked)
        named = ", ".join(tracked) + (f" and {more_tracked} more" if more_tracked > 0 and tracked else "")
        parts.append(f"changed: {named}" if tracked else f"{changes['tracked']} tracked file(s) differ from HEAD")
    if names:
        parts.append(f"untracked: {listed}")
    if changes.get("hidden"):
        parts.append(f"index entries that hide changes: {changes['hidden']}")
    if changes.get("error"):
        parts.append(str(changes["error"]))
    said = (
        "alpha observe: the working tree is dirty ("
        + "; ".join(parts or ["changes"])
        + "): a device gate's [[rebuild]] stays inconclusive, so the verdict cannot be physical; "
        "commit, ignore or remove them before recording"
    )
    sys.stderr.write(printable(mask_text(said, rec.secrets)) + "\n")


def _start_sampler(rec: Recording, control: Control) -> Sampler | None:
    """The device and process-tree sampler (None with ``--observe-devices off``), started now, with the
    observer that began to open at the recording's start."""
    if rec.options.observe_devices == "off":
        return None
    from observe.recorder.sampler import Sampler

    sampler = Sampler(
        rec.sink,
        mode=rec.options.observe_devices,
        interval=rec.options.sample_interval,
        env=os.environ,
        open_steps=control.open_steps,
        mask=lambda text: mask_text(text, rec.secrets),
        opening=rec.observer_opening,
        cwd=rec.cwd,
        observer_key=rec.observer_key,
    )
    sampler.start()
    return sampler


def _capture_lane_configs(rec: Recording) -> None:
    """Capture each ``ALPHA_*_DEVICE_CONFIG`` file named in the recorder's environment, before the command runs.

    These artifacts alone carry ``origin: "recorder"`` (and ``env``): the control
    channel refuses both keys, so a command cannot pass its own copy off as this one.
    """
    from observe.devices.observers import lane_configs

    for name, value in lane_configs(os.environ):
        artifacts.capture_file(
            lambda kind, attrs, data, step: rec.sink.append(kind, attrs, data, step),
            os.path.realpath(os.path.join(rec.cwd, value)),
            cwd=rec.cwd,
            max_bytes=rec.options.artifact_max_bytes,
            attrs={"origin": "recorder", "env": name},
            secrets=rec.secrets,
        )


def _command_env(rec: Recording, control: Control) -> dict[str, str]:
    """The command's environment: the recorder's, less what it must not see or inherit, plus the channel's
    variables, the recorder's ``alpha`` first on ``PATH``, and the stream's path and id."""
    env = command_environ(rec.options)
    for name in (ENV_STEP, ENV_STDOUT_ID, ENV_STDERR_ID):
        env.pop(name, None)
    env.update(control.env())
    put_alpha_first(env, control.directory)
    env[ENV_STREAM] = str(rec.path.resolve())
    env[ENV_STREAM_ID] = rec.stream_id
    return env


def _run_command(rec: Recording, control: Control, sampler: Sampler | None) -> tuple[Outcome, int]:
    """Capture the lane configs, append the start observation, run the command; return its outcome
    and when it started (``time.monotonic_ns``)."""
    from observe.recorder.containment import open_container
    from observe.recorder.spawn import SpawnFailure, spawn

    _capture_lane_configs(rec)
    if sampler is not None:
        start = sampler.take_start()
        if start is not None:
            rec.sink.append(kinds.DEVICE_OBSERVED, start)
        for kind, attrs in sampler.take_node_starts():  # the remote nodes' (observe.devices.remote)
            rec.sink.append(kind, attrs)
    env = _command_env(rec, control)
    not_ours = frozenset(children_of(os.getpid()))  # a library caller's own children are not the command's
    container = open_container(rec.stream_id, not_ours)  # what the recorder ends as a whole at the end
    try:
        started_ns = time.monotonic_ns()
        spawned = spawn(rec.argv, env, pty=rec.options.pty, container=container)
        if isinstance(spawned, SpawnFailure):
            return _not_started(rec, spawned, started_ns), started_ns
        start_attrs = {"pid": spawned.pid, "argv": _argv_text(rec.argv, rec.secrets), **container.describe()}
        rec.sink.append(kinds.PROCESS_START, start_attrs)
        if sampler is not None:
            sampler.command_started(spawned.pid)
        outcome = _capture(rec, spawned, control, started_ns=started_ns, not_ours=not_ours, container=container)
    finally:
        container.close()
    _after_exit(rec, outcome, bool(start_attrs["guaranteed"]))
    return outcome, started_ns


def _not_started(rec: Recording, spawned: SpawnFailure, started_ns: int) -> Outcome:
    """Record a command that could not start (``process.exit`` with its error; said on stderr too)."""
    from observe.recorder.capture import Outcome

    rec.sink.append(
        kinds.PROCESS_EXIT,
        {
            "exit_code": spawned.exit_code,
            "signal": None,
            "timed_out": False,
            "duration_ns": time.monotonic_ns() - started_ns,
            "rusage": None,
            "interrupted": None,
            "stray_writers": False,
            "error": printable(mask_text(spawned.error, rec.secrets)),
        },
    )
    if not rec.options.quiet:
        sys.stderr.write(f"alpha observe: {mask_text(spawned.error, rec.secrets)}\n")
    return Outcome(exit_code=spawned.exit_code, shell_code=spawned.exit_code)


def _capture(
    rec: Recording,
    spawned: Spawned,
    control: Control,
    *,
    started_ns: int,
    not_ours: frozenset[int],
    container: Container,
) -> Outcome:
    """Capture the started command until it and its stray writers are done (``process.exit`` included)."""
    from observe.recorder.capture import Capture

    capture = Capture(
        spawned,
        rec.sink,
        rec.echo,
        control,
        rec.secrets,
        timeout=rec.options.timeout,
        kill_grace=tuning.kill_grace(),
        drain_seconds=tuning.drain_seconds(),
        started_ns=started_ns,
        not_ours=not_ours,
        container=container,
    )
    try:
        return capture.run()
    finally:
        if spawned.give_back_terminal is not None:
            spawned.give_back_terminal()


def _after_exit(rec: Recording, outcome: Outcome, promised: bool) -> None:
    """Say what followed the command's exit: a timeout, stray writers, processes ended (and how the container
    ended: ``process.stray`` also when its end was less certain than ``promised`` at the start), a late
    interrupt."""
    if outcome.timed_out:
        logger().warning("command timed out; its process group was stopped", timeout=rec.options.timeout)
    if outcome.stray:
        logger().warning(
            "background processes still hold the command's output; stopped waiting for them",
            still_open=",".join(outcome.stray),
        )
    end = outcome.end
    if end is not None and end.survivors:
        logger().warning("processes of the command outlived the recording", survivors=len(end.survivors))
    if outcome.stray or outcome.ended or (end is not None and end.guaranteed < promised):
        rec.sink.append(
            kinds.PROCESS_STRAY,
            {
                "still_open": outcome.stray,
                "drained_ns": int(tuning.drain_seconds() * 1e9),
                "ended": [
                    {"pid": p["pid"], "argv": _argv_text(p["argv"], rec.secrets), "signal": p["signal"]}
                    for p in outcome.ended
                ],
                **(_end_attrs(rec, end) if end is not None else {}),
            },
        )
    if outcome.late_interrupt:
        rec.sink.append(kinds.RECORDER_INTERRUPTED, {"signal": outcome.late_interrupt})


def _end_attrs(rec: Recording, end: End) -> dict[str, Any]:
    """``process.stray``'s account of the container's end: its kind, whether it is guaranteed, what survived."""
    return {
        "containment": end.containment,
        "guaranteed": end.guaranteed,
        "survivors": [{"pid": p["pid"], "argv": _argv_text(p["argv"], rec.secrets)} for p in end.survivors],
        "containment_note": mask_text(end.note, rec.secrets),
    }


def _final_artifacts(rec: Recording, outcome: Outcome, started_ns: int) -> None:
    """The ``--artifact`` captures, bounded by ``--timeout`` (counted from the command's start) and by
    SIGINT/SIGTERM/SIGHUP, which end the capture where it is; the stream is sealed either way."""
    import signal
    import threading

    deadline = started_ns / 1e9 + rec.options.timeout if rec.options.timeout is not None else None
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
            lambda kind, attrs, data, step: rec.sink.append(kind, attrs, data, step),
            rec.options.artifacts,
            cwd=rec.cwd,
            max_bytes=rec.options.artifact_max_bytes,
            secrets=rec.secrets,
            stop=stop,
        )
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if caught:
        rec.sink.append(kinds.RECORDER_INTERRUPTED, {"signal": caught[0]})
