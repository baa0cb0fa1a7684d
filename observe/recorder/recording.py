"""The values a recording is made of: its options, its parts while it runs (``Recording``), its result."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aos.writer import SealInfo, StreamWriter
    from observe.recorder.sampler import ObserverOpening
    from observe.recorder.sinks import Echo
    from observe.secrets.masking import SecretSet
    from observe.secrets.sources import MaskingSink

__all__ = [
    "DEFAULT_DIR",
    "Append",
    "BeforeSeal",
    "Companion",
    "RecordOptions",
    "RecordResult",
    "Recording",
    "command_environ",
    "observer_key",
]

#: Where streams go without ``--out`` (not hidden: CI artifact uploaders skip hidden folders).
DEFAULT_DIR = "aos-streams"


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
    #: The SSH private key of the nodes' observer accounts, a file (``--observer-key``: the command can read it).
    observer_key: Path | None = None
    #: The same key in this environment variable, which the command never sees (``--observer-key-env``).
    observer_key_env: str | None = None
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
    #: Steps the gate expects to refuse (exit non-zero): the echo labels them as expected refusal controls.
    expected_refusals: tuple[str, ...] = ()
    #: Events appended right after ``stream.open``, as ``(kind, attrs)``: a session's expected set
    #: (observe.session.coordinator). Empty for every other recording.
    opening: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    #: Variables added to the command's environment (a session's folder and origin for its launcher).
    command_env: Mapping[str, str] = field(default_factory=dict)
    #: Started with the recorder's ``append`` once the opening events are in, and stopped (the callable it
    #: returns) when the command has exited: a session's watcher of its arriving members. None elsewhere.
    companion: Companion | None = None


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
    #: The command replaced or edited the file at ``path``; the recorder put its stream back (observe.recorder.outpath).
    path_restored: bool = False
    #: Where what the command left at ``path`` was moved (``PATH.foreign-N``), when something was there.
    foreign: Path | None = None


#: An event sink: ``append(kind, attrs)``, safe from any thread while the command runs.
Append = Callable[[str, dict[str, Any]], None]
#: Started with an ``Append``; returns what stops it.
Companion = Callable[[Append], Callable[[], None]]

#: Called with the writer after everything is recorded, before the seal: it may
#: read back what the writer wrote (``writer.written_events()``) and append.
BeforeSeal = Callable[["StreamWriter"], None]


@dataclass(frozen=True)
class Recording:
    """One recording under way: its stream and what writes to it, opened before the command runs and handed on
    to each stage that follows, up to the seal."""

    argv: list[str]
    options: RecordOptions
    path: Path
    stream_id: str
    cwd: str
    writer: StreamWriter
    sink: MaskingSink  # masks every event, then appends it to ``writer`` on a thread of its own
    echo: Echo
    secrets: SecretSet
    channel_dir: str  # the private folder of the channel's socket, receipts file and alpha shim
    observer_opening: ObserverOpening | None  # the device observer, opening since the recording began
    #: The nodes' observer key as ``(source, label, text)``: source ``env`` or ``file`` (None: not given).
    observer_key: tuple[str, str, str] | None = None


def command_environ(options: RecordOptions) -> dict[str, str]:
    """The recorder's environment with ``options.command_env`` added, less what the command must never see
    (the ``--sign-key-env`` and ``--observer-key-env`` variables)."""
    env = dict(os.environ)
    env.update(options.command_env)
    for name in (options.sign_key_env, options.observer_key_env):
        if name is not None:
            env.pop(name, None)
    return env


def observer_key(options: RecordOptions) -> tuple[str, str, str] | None:
    """The nodes' observer key ``(source, label, text)`` of ``options``, read now (before the command runs)."""
    if options.observer_key_env is not None:
        return "env", f"${options.observer_key_env}", os.environ.get(options.observer_key_env, "")
    if options.observer_key is not None:
        try:
            text = Path(options.observer_key).read_text(encoding="utf-8", errors="surrogateescape")
        except OSError:
            text = ""  # refused per node (no-key), the reason in its observation
        return "file", str(options.observer_key), text
    return None
