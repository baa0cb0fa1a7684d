"""Secrets: redact them in the recorded environment, mask them in captured bytes.

An environment variable whose *name* looks secret (TOKEN, SECRET, PASSWORD, KEY,
CREDENTIAL, AUTH, ...) has its value replaced by ``[REDACTED]`` in ``stream.open``,
and that value (when long enough to be a secret rather than a flag) is masked
wherever it appears in captured output. ``--mask VALUE`` adds values of any length.

Masking is streaming: a :class:`Masker` holds back the few trailing bytes of a
chunk that could be the start of a secret, so a secret split across two reads is
still caught. Nothing is held back otherwise, so the echo stays live.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = [
    "MASK",
    "REDACTED",
    "SECRET_NAME_PARTS",
    "Masker",
    "env_secrets",
    "is_secret_name",
    "mask_bytes",
    "mask_text",
    "redact_env",
]

REDACTED = "[REDACTED]"
MASK = b"[MASKED]"

#: Substrings that make an environment variable's name look secret.
SECRET_NAME_PARTS: tuple[str, ...] = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "KEY",
    "CREDENTIAL",
    "AUTH",
    "PRIVATE",
    "COOKIE",
    "SESSION",
)
_SECRET_NAME = re.compile("|".join(SECRET_NAME_PARTS), re.IGNORECASE)

#: Env-derived values shorter than this are redacted in ``stream.open`` but not
#: masked in output: masking ``1`` or ``tty`` would destroy the log, not protect it.
MIN_ENV_MASK_LEN = 6
_TRIVIAL = frozenset({"true", "false", "yes", "no", "none", "null", "enabled", "disabled"})


def is_secret_name(name: str) -> bool:
    """True when an environment variable's name looks like it holds a secret."""
    return _SECRET_NAME.search(name) is not None


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` with secret-looking values replaced by ``[REDACTED]``."""
    return {k: (REDACTED if is_secret_name(k) and v else v) for k, v in env.items()}


def env_secrets(env: Mapping[str, str]) -> list[bytes]:
    """The values of secret-looking variables worth masking in output."""
    out: list[bytes] = []
    for name, value in env.items():
        if is_secret_name(name) and len(value) >= MIN_ENV_MASK_LEN and value.lower() not in _TRIVIAL:
            out.append(value.encode("utf-8", "surrogateescape"))
    return out


def _normalise(secrets: Iterable[bytes]) -> tuple[bytes, ...]:
    # Longest first, so a secret containing another is masked whole.
    return tuple(sorted({s for s in secrets if s}, key=lambda s: (-len(s), s)))


def mask_bytes(data: bytes, secrets: Iterable[bytes]) -> bytes:
    """``data`` with every occurrence of every secret replaced by ``[MASKED]``."""
    for secret in _normalise(secrets):
        if secret in data:
            data = data.replace(secret, MASK)
    return data


def mask_text(text: str, secrets: Iterable[bytes]) -> str:
    """:func:`mask_bytes` for text (UTF-8, undecodable bytes kept as escapes)."""
    raw = text.encode("utf-8", "surrogateescape")
    masked = mask_bytes(raw, secrets)
    return text if masked is raw else masked.decode("utf-8", "surrogateescape")


class Masker:
    """Masks one byte stream that arrives in chunks.

    ``feed`` returns the bytes that are safe to emit now; a tail that could be
    the beginning of a secret is kept until the next chunk (or ``finish``).
    """

    __slots__ = ("_held", "_secrets")

    def __init__(self, secrets: Iterable[bytes]) -> None:
        self._secrets = _normalise(secrets)
        self._held = b""

    @property
    def active(self) -> bool:
        return bool(self._secrets)

    def feed(self, chunk: bytes) -> bytes:
        """Mask ``chunk`` (after anything held back); return what can go out now."""
        if not self._secrets:
            return chunk
        data = self._held + chunk if self._held else chunk
        data = mask_bytes(data, self._secrets)
        keep = self._prefix_tail(data)
        if keep:
            self._held = data[-keep:]
            return data[:-keep]
        self._held = b""
        return data

    def finish(self) -> bytes:
        """The held-back tail, at the end of the stream (it held no whole secret)."""
        out, self._held = self._held, b""
        return out

    def _prefix_tail(self, data: bytes) -> int:
        """Length of the longest suffix of ``data`` that is a proper prefix of a secret."""
        best = 0
        n = len(data)
        for secret in self._secrets:
            first = secret[:1]
            # Only positions where the secret's first byte occurs can start a prefix.
            start = max(0, n - len(secret) + 1)
            pos = data.find(first, start)
            while pos != -1:
                tail = n - pos
                if tail > best and secret.startswith(data[pos:]):
                    best = tail
                    break
                pos = data.find(first, pos + 1)
        return best
