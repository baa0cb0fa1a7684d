"""The event kinds: one registry of every kind written to a stream, its attrs and who writes it.

Every module that writes or reads a kind spells it with a constant of this
module (``kinds.PROCESS_EXIT``), never as a string; docs/FORMAT.md's section 4
table lists exactly the kinds of ``REGISTRY`` (tests/aos/test_kinds.py holds
both, and the test vectors in samples/vectors/ hold one event of each).
Readers must still accept kinds they do not know (FORMAT.md 4).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "ARTIFACT",
    "ARTIFACT_CHUNK",
    "ARTIFACT_ERROR",
    "ARTIFACT_MISSING",
    "CHECKPOINT",
    "DEVICE_OBSERVED",
    "NODE_LOST",
    "OUTPUT",
    "PROCESS_EXIT",
    "PROCESS_START",
    "PROCESS_STRAY",
    "RECEIPT",
    "RECEIPT_INVALID",
    "RECORDER_ERROR",
    "RECORDER_INTERRUPTED",
    "REGISTRY",
    "SEAL",
    "SESSION_CHECKPOINT",
    "SESSION_MEMBER",
    "SESSION_OPEN",
    "STDERR",
    "STDOUT",
    "STEP_END",
    "STEP_START",
    "STREAM_OPEN",
    "TELEMETRY",
    "VERDICT",
    "Kind",
]

STREAM_OPEN = "stream.open"
DEVICE_OBSERVED = "device.observed"
TELEMETRY = "telemetry"
NODE_LOST = "node.lost"
PROCESS_START = "process.start"
STDOUT = "stdout"
STDERR = "stderr"
STEP_START = "step.start"
STEP_END = "step.end"
RECEIPT = "receipt"
RECEIPT_INVALID = "receipt.invalid"
ARTIFACT = "artifact"
ARTIFACT_CHUNK = "artifact.chunk"
ARTIFACT_ERROR = "artifact.error"
ARTIFACT_MISSING = "artifact.missing"
PROCESS_EXIT = "process.exit"
RECORDER_INTERRUPTED = "recorder.interrupted"
RECORDER_ERROR = "recorder.error"
PROCESS_STRAY = "process.stray"
CHECKPOINT = "checkpoint"
SESSION_OPEN = "session.open"
SESSION_MEMBER = "session.member"
SESSION_CHECKPOINT = "session.checkpoint"
VERDICT = "verdict"
SEAL = "seal"

#: The two kinds of the command's output (and of a step's, under its span).
OUTPUT = (STDOUT, STDERR)


class Kind(NamedTuple):
    """One event kind: its name, the attrs docs/FORMAT.md names for it, whether it has ``data``, and the
    modules that write it (dotted names; tests/aos/test_kinds.py checks each one spells the kind). A named
    tuple, not a dataclass: the light channel (``alpha observe receipt``) imports this module."""

    name: str
    fields: tuple[str, ...]
    writers: tuple[str, ...]
    data: bool = False


_RECORDER = "observe.recorder."
#: The command's output, a step's run by the recorder, a client's frames, the rebuild's.
_OUTPUT_WRITERS = (_RECORDER + "capture", _RECORDER + "control", _RECORDER + "steps", _RECORDER + "rebuild")

#: Every kind a stream may hold, in the order of docs/FORMAT.md's table.
REGISTRY: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            STREAM_OPEN,
            ("stream_id", "tool", "version", "argv", "recorder_argv", "cwd", "env", "host", "source", "gate", "labels"),
            (_RECORDER + "run",),
        ),
        Kind(
            DEVICE_OBSERVED,
            ("phase", "observer", "library", "driver", "cuda_driver", "namespace", "gpus", "processes"),
            (_RECORDER + "run", _RECORDER + "sampler", "observe.devices.remote"),
        ),
        Kind(TELEMETRY, ("tree", "gpus"), (_RECORDER + "sampler", "observe.devices.remote")),
        Kind(NODE_LOST, ("node", "reason", "at_ns"), ("observe.devices.remote",)),
        Kind(PROCESS_START, ("pid", "argv", "containment", "guaranteed", "containment_note"), (_RECORDER + "run",)),
        Kind(STDOUT, (), _OUTPUT_WRITERS, True),
        Kind(STDERR, (), _OUTPUT_WRITERS, True),
        Kind(STEP_START, ("name", "argv", "parent", "pid", "runner"), (_RECORDER + "control", _RECORDER + "rebuild")),
        Kind(
            STEP_END,
            ("name", "argv", "parent", "exit_code", "signal", "duration_ns"),
            (_RECORDER + "control", _RECORDER + "rebuild"),
        ),
        Kind(RECEIPT, ("name", "status", "fields"), (_RECORDER + "control",)),
        Kind(RECEIPT_INVALID, ("reason",), (_RECORDER + "control",), True),
        Kind(ARTIFACT, ("path", "size", "mode", "sha256", "blake3", "content", "kind"), (_RECORDER + "artifacts",)),
        Kind(ARTIFACT_CHUNK, ("path", "offset"), (_RECORDER + "artifacts",), True),
        Kind(
            PROCESS_EXIT,
            ("exit_code", "signal", "timed_out", "duration_ns", "rusage", "interrupted", "stray_writers"),
            (_RECORDER + "capture", _RECORDER + "run"),
        ),
        Kind(RECORDER_INTERRUPTED, ("signal", "during"), (_RECORDER + "capture", _RECORDER + "run")),
        Kind(
            RECORDER_ERROR,
            ("error",),
            (_RECORDER + "capture", _RECORDER + "control", _RECORDER + "record", _RECORDER + "steps"),
        ),
        Kind(PROCESS_STRAY, ("still_open", "drained_ns", "ended"), (_RECORDER + "run",)),
        Kind(ARTIFACT_ERROR, ("path", "error"), (_RECORDER + "artifacts",)),
        Kind(ARTIFACT_MISSING, ("pattern", "error"), (_RECORDER + "artifacts",)),
        Kind(CHECKPOINT, ("events", "head"), ("aos.writer",)),
        Kind(
            SESSION_OPEN,
            ("origin", "name", "parent", "members", "fanout", "unsigned"),
            ("observe.session.coordinator",),
        ),
        Kind(
            SESSION_MEMBER,
            ("name", "kind", "status", "reason", "at", "stream_id", "file_blake3", "head", "leaf", "received_ns"),
            ("observe.session.arrivals", "observe.session.coordinator"),
        ),
        Kind(
            SESSION_CHECKPOINT,
            ("origin", "size", "root", "note", "key", "leaves", "not_proven", "gpus"),
            ("observe.session.coordinator",),
        ),
        Kind(VERDICT, ("gate", "verdict", "scope", "checks"), (_RECORDER + "gating",)),
        Kind(SEAL, ("head", "events", "bytes", "file_blake3"), ("aos.writer",)),
    )
}
