"""Masking: secret values never reach the stream (or the live echo), whatever carries them.

A :class:`SecretSet` holds the values to mask. It grows while the command runs
(``::add-mask::`` lines, credentials found in URLs), and every :class:`Masker`
reading it sees new values at once. Each value is masked as written and in the
forms JSON gives it (``"`` and ``\\`` escaped, non-ASCII as ``\\uXXXX``, ``/``
as ``\\/``), so a secret inside JSON a command prints is caught too.

Besides the registered values, every mask also replaces the userinfo of a URL
(``scheme://user:password@host``) in place, and registers the password.

A :class:`Masker` masks one byte stream that arrives in chunks (stdout, stderr,
a step's output). It holds back only the tail of a chunk that could still turn
into something to mask: the start of a secret, an ``::add-mask::`` line whose
newline has not arrived, a URL's userinfo not yet ended. Nothing else is held,
so the echo stays live. ``::add-mask::VALUE`` at the start of a line (after
optional whitespace; GitHub's convention) adds VALUE, and the line itself is
recorded as ``::add-mask::[MASKED]``.

:func:`mask_bytes`, :func:`mask_text` and :func:`mask_value` mask whole values
(receipt fields after parsing, argv, paths, labels); :class:`Scanner` only tells
whether chunked bytes (an artifact's) hold something masked, without keeping them.

docs/SECRETS.md says what this can and cannot catch.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from aos.attrs import RECEIPT_STATUSES
from aos.text import BYTES_KEY, KEY_PREFIX, key_bytes, text_key, text_value, value_bytes

__all__ = [
    "ADD_MASK",
    "FREE_FORM_ATTRS",
    "MASK",
    "MEMMEM_MIN",
    "MIN_ENV_MASK_LEN",
    "SECRET_NAME_PARTS",
    "SECRET_NAME_WORDS",
    "VERBATIM_ATTRS",
    "Masker",
    "Scanner",
    "SecretSet",
    "env_secrets",
    "find",
    "is_secret_name",
    "mask_attrs",
    "mask_bytes",
    "mask_json_bytes",
    "mask_text",
    "mask_value",
    "url_credentials",
]

MASK = b"[MASKED]"
ADD_MASK = b"::add-mask::"

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
    "WEBHOOK",
    "SIGNATURE",
)
#: Whole words (between ``_``, ``-``, ``.``) that make a name look secret: ``PYPI_PW``, ``DB_PASS``, ``SENTRY_DSN``.
SECRET_NAME_WORDS: tuple[str, ...] = ("PW", "PASS", "DSN", "SALT", "BEARER", "CRED", "CREDS", "JWT", "OTP")
_SECRET_NAME = re.compile(
    "|".join(SECRET_NAME_PARTS) + "|" + "|".join(rf"(?:^|[_.-]){w}(?:$|[_.-])" for w in SECRET_NAME_WORDS),
    re.IGNORECASE,
)

#: Env-derived values (and passwords found in URLs) shorter than this are not
#: registered for masking everywhere: masking ``1`` or ``tty`` would destroy the
#: log, not protect it. Values given explicitly (``--mask``, ``::add-mask::``) have no minimum.
MIN_ENV_MASK_LEN = 6
_TRIVIAL = frozenset({"true", "false", "yes", "no", "none", "null", "enabled", "disabled"})

#: A URL's userinfo: after ``://``, up to 256 bytes that cannot end an authority, then ``@``.
MAX_USERINFO = 256
_UI_CLASS = rb"[^\s/?#@\[\]\"<>\\^`{|}]"
_URL_USERINFO = re.compile(rb"://(" + _UI_CLASS + rb"{1,256})@")
_UI_OPEN = re.compile(_UI_CLASS + rb"*")
#: A userinfo without a password is masked only when it is this long (a token, not ``git``).
MIN_TOKEN_USERINFO = 16
#: An ``::add-mask::`` line longer than this is taken as ended where it has got to.
MAX_MARKER_LINE = 64 << 10
_WS = frozenset(b" \t\r\f\v")
_NOT_WS = re.compile(rb"[^ \t\r\f\v]")


def is_secret_name(name: str) -> bool:
    """True when an environment variable's name looks like it holds a secret."""
    return _SECRET_NAME.search(name) is not None


def _variants(raw: bytes) -> set[bytes]:
    """``raw`` and the forms JSON writers give it inside a string literal."""
    out = {raw}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return out
    for ensure_ascii in (False, True):
        esc = json.dumps(text, ensure_ascii=ensure_ascii)[1:-1]
        forms = {esc, esc.replace("/", "\\/")}
        if ensure_ascii:
            forms |= {re.sub(r"\\u([0-9a-f]{4})", lambda m: "\\u" + m.group(1).upper(), f) for f in forms}
        out |= {f.encode("utf-8") for f in forms}
    return out


class SecretSet:
    """The values masked in one recording; it only grows, and is safe to share between threads."""

    def __init__(self, values: Iterable[bytes | str] = ()) -> None:
        self._lock = threading.Lock()
        self._values: set[bytes] = set()
        self._patterns: tuple[bytes, ...] = ()
        self.max_len = 0
        self.update(values)

    def add(self, value: bytes | str, *, min_len: int = 1) -> bool:
        """Mask ``value`` from now on (unless shorter than ``min_len``); True when it is new."""
        return self.update([value], min_len=min_len) == 1

    def update(self, values: Iterable[bytes | str], *, min_len: int = 1) -> int:
        """:meth:`add` for many values at once (one sort); the number that were new."""
        new = set()
        for value in values:
            raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
            if len(raw) >= max(min_len, 1) and raw not in self._values:
                new.add(raw)
        if not new:
            return 0
        with self._lock:
            new -= self._values
            self._values |= new
            patterns = set(self._patterns)
            for raw in new:
                patterns |= _variants(raw)
            # Longest first, so a secret containing another is masked whole.
            self._patterns = tuple(sorted(patterns, key=lambda s: (-len(s), s)))
            self.max_len = len(self._patterns[0])
        return len(new)

    @property
    def patterns(self) -> tuple[bytes, ...]:
        """Every byte string masked now: each value and its JSON-escaped forms, longest first."""
        return self._patterns

    def __contains__(self, value: object) -> bool:
        return value in self._values

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._patterns)

    def __len__(self) -> int:
        return len(self._values)

    def __bool__(self) -> bool:
        return bool(self._values)


def _as_set(secrets: SecretSet | Iterable[bytes]) -> SecretSet:
    return secrets if isinstance(secrets, SecretSet) else SecretSet(secrets)


def url_credentials(data: bytes) -> list[bytes]:
    """The secrets in URLs' userinfo in ``data``: each password (as written and percent-decoded) and
    ``user:password`` pair, or a token-long user with no password."""
    found: list[bytes] = []
    if b"://" not in data:
        return found
    for m in _URL_USERINFO.finditer(data):
        found += _userinfo_secrets(m.group(1))
    return found


def _userinfo_secrets(userinfo: bytes) -> list[bytes]:
    user, colon, password = userinfo.partition(b":")
    if colon and password:
        values = [password, userinfo]
    elif len(user) >= MIN_TOKEN_USERINFO:
        values = [user]
    else:
        return []
    from urllib.parse import unquote_to_bytes  # only when a URL holds credentials

    decoded = [unquote_to_bytes(v) for v in values]
    return values + [d for d in decoded if d not in values]


def env_secrets(env: Iterable[tuple[str, str]] | dict[str, str]) -> list[bytes]:
    """The env values worth masking everywhere: values of secret-looking names, and credentials in URLs."""
    items = env.items() if isinstance(env, dict) else env
    out: list[bytes] = []
    for name, value in items:
        raw = value.encode("utf-8", "surrogateescape")
        if is_secret_name(name) and len(raw) >= MIN_ENV_MASK_LEN and value.lower() not in _TRIVIAL:
            out.append(raw)
        out += [c for c in url_credentials(raw) if len(c) >= MIN_ENV_MASK_LEN]
    return out


def _prefix_tail(data: bytes, patterns: tuple[bytes, ...]) -> int:
    """Length of the longest suffix of ``data`` that is a proper prefix of a pattern."""
    best = 0
    n = len(data)
    for secret in patterns:
        first = secret[:1]
        # Only positions where the secret's first byte occurs can start a prefix.
        pos = data.find(first, max(0, n - len(secret) + 1))
        while pos != -1:
            tail = n - pos
            if tail <= best:
                break
            if secret.startswith(data[pos:]):
                best = tail
                break
            pos = data.find(first, pos + 1)
    return best


#: A scan of at least this many bytes runs in libc's ``memmem``, called through ctypes, which releases
#: the GIL meanwhile (the recorder's compressing threads run); a shorter one is ``bytes.find`` (the
#: foreign call costs more than it saves). ``bytes.find`` holds the GIL: on a machine with many cores the
#: output's scans for ``::add-mask::`` and the secrets were the recorder's longest-held lock.
MEMMEM_MIN = 1 << 16

_memmem: Any = None  # (memmem, ctypes) once looked up; False where libc has none


def _load_memmem() -> Any:
    global _memmem
    if _memmem is None:
        try:
            import ctypes

            fn = ctypes.CDLL(None).memmem
            fn.restype = ctypes.c_void_p
            fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
            _memmem = (fn, ctypes)
        except (OSError, AttributeError):  # pragma: no cover - a libc without memmem
            _memmem = False
    return _memmem


def find(data: bytes, needle: bytes, start: int = 0) -> int:
    """``data.find(needle, start)`` for ``bytes``; long scans leave the GIL to other threads."""
    if len(data) - start < MEMMEM_MIN or not needle or start < 0 or type(data) is not bytes:
        return data.find(needle, start)
    loaded = _load_memmem()
    if not loaded:  # pragma: no cover - a libc without memmem
        return data.find(needle, start)
    memmem, ctypes = loaded
    base = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value
    hit = memmem(base + start, len(data) - start, needle, len(needle))
    return -1 if hit is None else int(hit) - base


def _find_marker(data: bytes, start: int) -> int:
    """``data.find(ADD_MASK, start)``: found by ``::add-mask`` (a needle ending in a rarer byte than ``:``)."""
    pos = find(data, b"::add-mask", start)
    while pos != -1 and data[pos + 10 : pos + 12] != b"::":
        pos = find(data, b"::add-mask", pos + 1)
    return pos


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if merged and a < merged[-1][1]:
            if b > merged[-1][1]:
                merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    return merged


class Masker:
    """Masks one byte stream that arrives in chunks.

    ``feed`` returns the bytes that are safe to emit now; a tail that could
    still become something to mask is kept until the next chunk (or ``finish``).
    With ``commands`` (output streams), ``::add-mask::`` lines are honoured.
    ``masked`` tells whether anything was masked so far.
    """

    __slots__ = ("_held", "_prev", "_ws_line", "commands", "masked", "secrets")

    def __init__(self, secrets: SecretSet | Iterable[bytes], *, commands: bool = True) -> None:
        self.secrets = _as_set(secrets)
        self.commands = commands
        self.masked = False
        self._held = b""
        self._prev = b""  # the last raw bytes emitted: a "://" split across chunks is still seen
        self._ws_line = True  # everything emitted on the current line is whitespace

    def feed(self, chunk: bytes) -> bytes:
        """Mask ``chunk`` (after anything held back); return what can go out now."""
        data = self._held + chunk if self._held else chunk
        return self._process(data, final=False)

    def finish(self) -> bytes:
        """The held-back tail, masked, at the end of the stream."""
        data, self._held = self._held, b""
        return self._process(data, final=True) if data else b""

    # -- one pass --------------------------------------------------------------------

    def _process(self, data: bytes, *, final: bool) -> bytes:
        n = len(data)
        spans: list[tuple[int, int]] = []  # to replace by MASK
        whole: list[tuple[int, int]] = []  # never cut inside: a marker line, a URL's "://userinfo@"
        cut = n
        if self.commands:
            cut = min(cut, self._commands(data, spans, whole, final))
        cut = min(cut, self._urls(data, spans, whole, final))
        patterns = self.secrets.patterns
        if not final and patterns:
            cut = min(cut, n - _prefix_tail(data, patterns))
        cut = self._settle_cut(data, cut, patterns, whole)
        ready = data[:cut] if cut < n else data
        self._held = data[cut:] if cut < n else b""
        for secret in patterns:
            pos = find(ready, secret)
            while pos != -1:
                spans.append((pos, pos + len(secret)))
                pos = find(ready, secret, pos + len(secret))
        self._remember(ready)
        spans = [s for s in spans if s[1] <= cut]
        if not spans:
            return ready
        self.masked = True
        out = bytearray()
        last = 0
        for a, b in _merge(spans):
            out += ready[last:a]
            out += MASK
            last = b
        out += ready[last:]
        return bytes(out)

    @staticmethod
    def _settle_cut(data: bytes, cut: int, patterns: tuple[bytes, ...], whole: list[tuple[int, int]]) -> int:
        """Move ``cut`` back until no secret occurrence and no whole region crosses it."""
        n = len(data)
        moved = cut < n
        while moved:
            moved = False
            for secret in patterns:
                size = len(secret)
                if size < 2:
                    continue
                pos = data.find(secret, max(0, cut - size + 1), min(n, cut + size - 1))
                if pos != -1 and pos < cut:
                    cut, moved = pos, True
            for a, b in whole:
                if a < cut < b:
                    cut, moved = a, True
        return cut

    def _remember(self, ready: bytes) -> None:
        if not ready:
            return
        self._prev = (self._prev + ready[-3:])[-3:]
        nl = ready.rfind(b"\n")
        if nl != -1:
            self._ws_line = _NOT_WS.search(ready, nl + 1) is None
        elif self._ws_line:
            self._ws_line = _NOT_WS.search(ready) is None

    def _line_start(self, data: bytes, pos: int) -> bool:
        """True when only whitespace precedes ``pos`` on its line."""
        i = pos
        while i > 0 and data[i - 1] in _WS:
            i -= 1
        return data[i - 1] == 0x0A if i > 0 else self._ws_line

    def _commands(self, data: bytes, spans: list[tuple[int, int]], whole: list[tuple[int, int]], final: bool) -> int:
        """Honour ``::add-mask::VALUE`` lines; return where an unfinished one starts (or ``len(data)``)."""
        n = len(data)
        pos = _find_marker(data, 0)
        while pos != -1:
            if not self._line_start(data, pos):
                pos = _find_marker(data, pos + 1)
                continue
            start = pos + len(ADD_MASK)
            end = data.find(b"\n", start)
            if end == -1:
                if not final and n - start < MAX_MARKER_LINE:
                    return pos
                end = n
            value = data[start:end]
            if value.endswith(b"\r"):
                value = value[:-1]
            self._add_mask(value)
            if value:
                spans.append((start, start + len(value)))
            whole.append((pos, end))
            pos = _find_marker(data, end)
        if not final:
            for size in range(min(len(ADD_MASK) - 1, n), 0, -1):
                if data.endswith(ADD_MASK[:size]) and self._line_start(data, n - size):
                    return n - size
        return n

    def _add_mask(self, value: bytes) -> None:
        # GitHub's workflow-command escapes: %25 %, %0D CR, %0A LF.
        unescaped = value.replace(b"%0D", b"\r").replace(b"%0A", b"\n").replace(b"%25", b"%")
        for v in {value, value.strip(), unescaped, unescaped.strip()}:
            if v.strip():  # "::add-mask:: " must not mask every space
                self.secrets.add(v)

    def _urls(self, data: bytes, spans: list[tuple[int, int]], whole: list[tuple[int, int]], final: bool) -> int:
        """Mask URLs' userinfo; return where an unfinished one starts (or ``len(data)``)."""
        n = len(data)
        if self._prev:  # "://" split across chunks: it started in what was already emitted
            junction = self._prev + data[:2]
            j = junction.find(b"://")
            if j != -1 and j < len(self._prev):
                begin = j + 3 - len(self._prev)
                m = _UI_OPEN.match(data, begin, begin + MAX_USERINFO + 1)
                stop = m.end() if m else begin
                if stop < n and data[stop : stop + 1] == b"@" and 0 < stop - begin <= MAX_USERINFO:
                    self._userinfo(data, begin, stop, spans)
                    whole.append((0, stop + 1))
                elif stop == n and not final and n - begin < MAX_USERINFO:
                    return begin
        if b"@" in data:  # output without an @ holds no complete userinfo: one scan, no regex
            for m in _URL_USERINFO.finditer(data):
                self._userinfo(data, m.start(1), m.end(1), spans)
                whole.append((m.start(), m.end()))
        if not final:
            last = data.rfind(b"://", max(0, n - MAX_USERINFO - 3))
            begin = last + 3
            if last != -1 and n - begin < MAX_USERINFO:
                m = _UI_OPEN.match(data, begin)
                if m is not None and m.end() == n and n > begin:
                    return begin
        return n

    def _userinfo(self, data: bytes, start: int, end: int, spans: list[tuple[int, int]]) -> None:
        found = _userinfo_secrets(data[start:end])
        if not found:
            return
        spans.append((start, end))
        for value in found:
            self.secrets.add(value, min_len=MIN_ENV_MASK_LEN)


def mask_bytes(data: bytes, secrets: SecretSet | Iterable[bytes]) -> bytes:
    """``data`` with every secret, and every URL's userinfo, replaced by ``[MASKED]``."""
    if not data:
        return data
    return Masker(secrets, commands=False)._process(data, final=True)


def mask_text(text: str, secrets: SecretSet | Iterable[bytes]) -> str:
    """:func:`mask_bytes` for text (UTF-8, undecodable bytes kept as escapes)."""
    raw = text.encode("utf-8", "surrogateescape")
    masked = mask_bytes(raw, secrets)
    return text if masked is raw else masked.decode("utf-8", "surrogateescape")


#: Top-level attrs whose values are enums, digests, ids or signal names (computed by the recorder,
#: or checked against an enum): kept verbatim when they have that shape, so a short mask cannot
#: garble the evidence gates read. Any other value under these names is masked like the rest.
VERBATIM_ATTRS: dict[str, re.Pattern[str]] = {
    name: re.compile(shape)
    for name, shape in {
        "stream_id": r"[0-9A-Za-z_-]{1,64}",
        "tool": r"alpha-observe",
        "version": r"[0-9A-Za-z.+_-]{1,64}",
        "gate": r"[0-9A-Za-z._-]{1,128}",
        "status": "|".join(RECEIPT_STATUSES),
        "kind": r"[a-z.-]{1,32}",
        "content": r"inline|omitted",
        "sha256": r"[0-9a-f]{64}",
        "blake3": r"[0-9a-f]{64}",
        "signal": r"SIG[0-9A-Z+]{1,16}",
        "interrupted": r"SIG[0-9A-Z+]{1,16}",
    }.items()
}
#: Top-level attrs that are free-form objects: their keys are data too, and masked.
FREE_FORM_ATTRS = frozenset({"fields", "labels"})


def mask_attrs(attrs: dict[str, Any], secrets: SecretSet | Iterable[bytes]) -> dict[str, Any]:
    """An event's attrs, masked: every string value at any depth, and the keys of free-form objects
    (receipt fields, labels). Attr names and :data:`VERBATIM_ATTRS` values are kept."""
    s = _as_set(secrets)
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        shape = VERBATIM_ATTRS.get(key)
        if value is None or (shape is not None and isinstance(value, str) and shape.fullmatch(value)):
            out[key] = value
        else:
            out[key] = mask_value(value, s, keys=key in FREE_FORM_ATTRS)
    return out


def _is_byte_text(v: Any) -> bool:
    return isinstance(v, dict) and len(v) == 1 and isinstance(v.get(BYTES_KEY), str)


def mask_value(value: Any, secrets: SecretSet | Iterable[bytes], *, keys: bool = True) -> Any:
    """A copy of a JSON-like value with every string and bytes (and, with ``keys``, every key) masked;
    iterative, any depth."""
    s = _as_set(secrets)

    def leaf(v: Any) -> Any:
        if isinstance(v, str):
            if v.startswith(KEY_PREFIX):  # byte text where only a string can stand (FORMAT.md 3.7)
                return text_key(mask_bytes(key_bytes(v), s))
            return mask_text(v, s)
        if isinstance(v, bytes | bytearray):
            return mask_bytes(bytes(v), s)
        if _is_byte_text(v):  # {"bytes_b64": ...}: masked as the bytes it stands for, not its base64
            raw = value_bytes(v)
            return text_value(mask_bytes(raw, s)) if raw is not None else v
        return v

    if not isinstance(value, dict | list | tuple) or _is_byte_text(value):
        return leaf(value)
    root: Any = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        src, dst = stack.pop()
        items = src.items() if isinstance(src, dict) else enumerate(src)
        for key, v in items:
            if isinstance(v, dict | list | tuple) and not _is_byte_text(v):
                child: Any = {} if isinstance(v, dict) else []
                stack.append((v, child))
            else:
                child = leaf(v)
            if isinstance(dst, dict):
                dst[leaf(key) if keys else key] = child
            else:
                dst.append(child)
    return root


def _json_strings(data: bytes) -> Iterator[tuple[int, int, bool]]:
    """``(start, end, terminated)`` of each JSON string literal in ``data`` (an unterminated last one
    runs to the end); one linear scan."""
    n = len(data)
    i = data.find(b'"')
    while i != -1:
        j = i + 1
        q = data.find(b'"', j)
        while True:
            b = data.find(b"\\", j, q if q != -1 else n)
            if b == -1:
                break
            j = b + 2
            if q != -1 and j > q:
                q = data.find(b'"', j)
        if q == -1:
            yield i, n, False
            return
        yield i, q + 1, True
        i = data.find(b'"', q + 1)


def mask_json_bytes(data: bytes, secrets: SecretSet | Iterable[bytes]) -> bytes:
    """:func:`mask_bytes`, and also any JSON string literal that decodes to text holding a secret
    (``\\uXXXX``-escaped or otherwise): for raw lines that did not parse (``receipt.invalid``)."""
    s = _as_set(secrets)
    data = mask_bytes(data, s)
    if b"\\" not in data or not s:
        return data
    out = bytearray()
    last = 0
    for a, b, terminated in _json_strings(data):
        literal = data[a:b]
        if b"\\" not in literal:
            continue
        try:
            text = json.loads(literal) if terminated else _decode_open_literal(literal)
        except ValueError:
            continue
        if isinstance(text, str) and mask_text(text, s) != text:
            out += data[last:a] + b'"' + MASK + (b'"' if terminated else b"")
            last = b
    if not last:
        return data
    out += data[last:]
    return bytes(out)


def _decode_open_literal(literal: bytes) -> Any:
    """An unterminated literal decoded: a quote added, after dropping a dangling escape if need be."""
    for cut in range(6):
        try:
            return json.loads(literal[: len(literal) - cut] + b'"')
        except ValueError:
            continue
    raise ValueError("not a JSON string")


class Scanner:
    """Tells whether bytes fed in chunks hold a masked value (a secret, or a URL's credentials), also
    split across chunks; keeps only a short overlap, never the bytes."""

    __slots__ = ("_tail", "found", "secrets")

    def __init__(self, secrets: SecretSet | Iterable[bytes]) -> None:
        self.secrets = _as_set(secrets)
        self.found = False
        self._tail = b""

    def _holds(self, data: bytes) -> bool:
        if any(secret in data for secret in self.secrets.patterns):
            return True
        if b"@" in data:  # no @, no userinfo: one fast scan instead of the regex
            return any(_userinfo_secrets(m.group(1)) for m in _URL_USERINFO.finditer(data))
        return False

    def feed(self, chunk: bytes) -> None:
        if self.found or not chunk:
            return
        keep = max(self.secrets.max_len, MAX_USERINFO + 4) - 1
        junction = self._tail + chunk[:keep]
        if (self._tail and self._holds(junction)) or self._holds(chunk):
            self.found = True
            return
        self._tail = (self._tail + chunk)[-keep:] if len(chunk) < keep else chunk[-keep:]
