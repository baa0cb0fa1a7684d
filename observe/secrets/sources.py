"""A recording's secrets: where the values to mask come from, and the sink that masks every event.

    secrets = secrets_for_recording(os.environ, masks=["hunter2"], mask_env=["DEPLOY_KEY"])
    sink = MaskingSink(writer, secrets)

Sources, all masked in everything the stream holds: ``--mask VALUE``, the value
of each ``--mask-env NAME``, each line of a ``--mask-file FILE``, the values of
env variables whose names look secret, and credentials found in URLs in any env
value. While the command runs, its ``::add-mask::VALUE`` lines and URLs with
credentials in what it prints add more (observe.secrets.masking).

:class:`MaskingSink` is the one place every event passes through: its attrs
(every string at any depth: receipt fields after parsing, step names and argv,
labels, artifact paths and symlink targets, errors; the keys of receipt fields
and labels) and its span are masked there; attr names, env names and values the
recorder computes (digests, enums, ids) stay as they are (observe.secrets.masking.mask_attrs).
So is its data, except output and artifact bytes, which their own streaming
maskers have already masked (split across reads).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos import kinds
from observe.recorder.sinks import Sink
from observe.secrets.masking import SecretSet, env_secrets, mask_attrs, mask_json_bytes, mask_value

if TYPE_CHECKING:
    from aos.writer import StreamWriter

__all__ = ["MASK_FILE_MAX_BYTES", "MaskingSink", "mask_file_values", "read_mask_file", "secrets_for_recording"]

#: A mask file larger than this is refused (it is a list of values, not data).
MASK_FILE_MAX_BYTES = 1 << 20

#: Kinds whose data a streaming masker has already masked before the event is appended.
_STREAMED = frozenset({kinds.STDOUT, kinds.STDERR, kinds.ARTIFACT_CHUNK})


def secrets_for_recording(
    environ: Mapping[str, str], *, masks: Iterable[str | bytes] = (), mask_env: Iterable[str] = ()
) -> tuple[SecretSet, list[str]]:
    """The secrets a recording starts with, and the ``mask_env`` names that were not set (nothing to mask)."""
    values: list[str | bytes] = list(masks)
    unset = []
    for name in mask_env:
        env_value = environ.get(name)
        if env_value:
            values.append(env_value)
        else:
            unset.append(name)
    values += env_secrets(dict(environ))
    return SecretSet(values), unset


def read_mask_file(path: str | os.PathLike[str]) -> list[str]:
    """The values in a mask file: one a line, a trailing CR dropped, blank lines skipped.

    A regular file or a pipe (``--mask-file <(printf '%s\\n' "$TOKEN")``); raises
    ValueError, saying why, for anything else or a file that cannot be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        raise ValueError(f"cannot open {os.fspath(path)}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise ValueError(f"{os.fspath(path)} is not a regular file or a pipe")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
            size += len(chunk)
            if size > MASK_FILE_MAX_BYTES:
                raise ValueError(f"{os.fspath(path)} is larger than {MASK_FILE_MAX_BYTES} bytes")
    except OSError as exc:
        raise ValueError(f"cannot read {os.fspath(path)}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    values = []
    for line in b"".join(chunks).split(b"\n"):
        if line.endswith(b"\r"):
            line = line[:-1]
        if line:
            values.append(line.decode("utf-8", "surrogateescape"))
    return values


class MaskingSink(Sink):
    """A :class:`~observe.recorder.sinks.Sink` that masks every event before it is queued."""

    def __init__(self, writer: StreamWriter, secrets: SecretSet, **kwargs: Any) -> None:
        super().__init__(writer, **kwargs)
        self.secrets = secrets

    def mask_attrs(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return mask_attrs(attrs, self.secrets)

    def append(
        self, kind: str, attrs: dict[str, Any] | None = None, data: bytes | None = None, step: str | None = None
    ) -> None:
        if attrs:
            attrs = self.mask_attrs(attrs)
        if step is not None:
            step = mask_value(step, self.secrets)  # byte text too (FORMAT.md 3.7)
        if data is not None and kind not in _STREAMED:
            data = mask_json_bytes(data, self.secrets)
        super().append(kind, attrs, data, step)

    def append_direct(self, kind: str, attrs: dict[str, Any]) -> None:
        """Append straight to the writer, masked (after the worker stopped: it is the only writer then)."""
        from aos.refusals import StreamWrite

        try:
            self.writer.append(kind, self.mask_attrs(attrs))
        except StreamWrite as exc:
            self.failure = self.failure or exc


def mask_file_values(paths: Iterable[Path]) -> list[str]:
    """Every value of every mask file (ValueError names the first that cannot be read)."""
    values: list[str] = []
    for path in paths:
        values += read_mask_file(path)
    return values
