"""GitHub's workflow-command processing, followed through the lines the runner is shown.

A line ``::stop-commands::TOKEN`` makes the Actions runner stop processing workflow
commands (``::error``, ``::warning``, ``::group::`` ...) until a line whose command is
TOKEN (``::TOKEN::``). The recorded command's output reaches the job's log through the
recorder's echo, so a command could silence the recorder's own folds and annotations
that follow. ``WorkflowCommands`` follows the runner's state over every byte the echo
writes (the command's and the recorder's own), as the runner parses it
(``ActionCommandManager.TryProcessCommand`` and ``ActionCommand.TryParseV2``/``TryParse``
of actions/runner):

- lines end at CR or LF, on stdout and stderr separately (the state is shared);
- ``::NAME PROPS::DATA`` after leading white space, else ``##[NAME PROPS]DATA``
  anywhere in the line, for a registered NAME (case-insensitive); DATA is unescaped;
- ``stop-commands`` with an empty token, ``pause-logging`` or a registered command
  name is refused by the runner (unless ``ACTIONS_ALLOW_UNSECURE_STOPCOMMAND_TOKENS``);
- while stopped, only a line whose command is the token resumes.

``resume()`` gives the line that resumes the runner (``::TOKEN::``, or ``##[TOKEN]``
for a token holding ``::``), checked by parsing it back; ``stop()`` the line that stops
it again with the same token. A token that no line can resume (one holding a space, a
line break, or a line longer than ``MAX_LINE``) leaves the state ``lost``. This module
is light (standard library only): the recorder imports it at start.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["ALLOW_ANY_TOKEN", "MAX_LINE", "REGISTERED", "WorkflowCommands", "parse_command"]

#: The commands the runner registers (``stop-commands`` and its command extensions).
REGISTERED = frozenset(
    {
        "stop-commands",
        "set-env",
        "set-output",
        "save-state",
        "add-mask",
        "add-path",
        "add-matcher",
        "remove-matcher",
        "debug",
        "warning",
        "error",
        "notice",
        "group",
        "endgroup",
        "echo",
    }
)
#: The runner variable that lets a stop token be empty, ``pause-logging`` or a command's name.
ALLOW_ANY_TOKEN = "ACTIONS_ALLOW_UNSECURE_STOPCOMMAND_TOKENS"
#: The longest line followed whole; of a longer one only this much is parsed, and a stop in it is ``lost``.
MAX_LINE = 1 << 20

_STOP = "stop-commands"
_STOP_BYTES = _STOP.encode()
#: .NET's ``char.IsWhiteSpace``, which ``TrimStart`` removes.
_WHITESPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
_V2_DATA = (("%0D", "\r"), ("%0A", "\n"), ("%25", "%"))
_LEGACY = (("%3B", ";"), ("%0D", "\r"), ("%0A", "\n"), ("%5D", "]"), ("%25", "%"))


def _unescape(text: str, mapping: tuple[tuple[str, str], ...]) -> str:
    for escaped, plain in mapping:
        text = text.replace(escaped, plain)
    return text


def _fold(text: str) -> str:
    """``OrdinalIgnoreCase``'s key: each character upper-cased alone (never ``ß`` to ``SS``)."""
    return "".join(u if len(u := c.upper()) == 1 else c for c in text)


def parse_command(line: str, registered: frozenset[str]) -> tuple[str, str] | None:
    """``(name, data)`` of the workflow command ``line`` is for the runner, or None (``registered``: folded)."""
    v2 = line.lstrip(_WHITESPACE)
    if v2.startswith("::"):
        end = v2.find("::", 2)
        if end >= 0:
            name = v2[2:end].split(" ", 1)[0]
            if _fold(name) in registered:
                return name, _unescape(v2[end + 2 :], _V2_DATA)
    at = line.find("##[")
    if at >= 0:
        close = line.find("]", at)
        if close >= 0:
            name = line[at + 3 : close].split(" ", 1)[0]
            if _fold(name) in registered:
                return name, _unescape(line[close + 1 :], _LEGACY)
    return None


_REGISTERED = frozenset(_fold(n) for n in REGISTERED)


class WorkflowCommands:
    """The runner's command processing after the bytes fed so far: running, stopped by ``token``, or ``lost``."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.allow_any_token = (env.get(ALLOW_ANY_TOKEN) or "").strip().lower() in ("1", "true", "$true")
        self.token: str | None = None  # stopped: the token that resumes
        self.lost = False  # stopped by a token no line can resume (or one too long to follow)
        self._partial: dict[int, bytes] = {}  # fd -> its line so far (at most MAX_LINE bytes)
        self._overlong: dict[int, bool] = {}  # fd -> the line so far mentions stop-commands past MAX_LINE
        self._carry: dict[int, bytes] = {}  # fd -> the last bytes past MAX_LINE, for a mention split there

    def feed(self, fd: int, data: bytes) -> None:
        """Follow ``data`` written to ``fd`` (a read may end mid-line: the line is completed by later data)."""
        if not data or self.lost:
            return
        cut = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if cut < 0:
            self._extend(fd, data)
            return
        first = min(i for i in (data.find(b"\n"), data.find(b"\r")) if i >= 0)
        self._extend(fd, data[:first])
        self._line(fd)  # the line this data completes
        self._lines(data[first + 1 : cut + 1])
        self._extend(fd, data[cut + 1 :])  # the line it leaves open

    def _extend(self, fd: int, data: bytes) -> None:
        if not data:
            return
        had = self._partial.get(fd, b"")
        room = MAX_LINE - len(had)
        if room > 0:
            self._partial[fd] = had + data[:room]
        past = data[max(room, 0) :]
        if past:
            carried = self._carry.get(fd, b"") + past
            if _STOP_BYTES in carried.lower():
                self._overlong[fd] = True
            self._carry[fd] = carried[-(len(_STOP) - 1) :]
            self._overlong.setdefault(fd, False)

    def _line(self, fd: int) -> None:
        """The line of ``fd`` ended: follow it."""
        raw = self._partial.pop(fd, b"")
        self._carry.pop(fd, None)
        overlong = fd in self._overlong
        mentions = self._overlong.pop(fd, False)
        self._one(raw, overlong=overlong, mentions=mentions)

    def _lines(self, block: bytes) -> None:
        """Whole lines: only those that could change the state are decoded and parsed."""
        if self.lost or not block or (b"::" not in block and b"##[" not in block):
            return  # no line of it can be a command (the quick test: ~1.3 GB/s a core, as a fold of case is not)
        if self.token is None:
            if _STOP_BYTES not in block.lower():
                return
        elif self.token.isascii() and self.token.lower().encode() not in block.lower():
            return
        for raw in block.splitlines():
            self._one(raw, overlong=False, mentions=False)
            if self.lost:
                return

    def _one(self, raw: bytes, *, overlong: bool, mentions: bool) -> None:
        if self.lost or (not raw and not overlong):
            return
        line = raw.decode("utf-8", "replace")
        if self.token is not None:
            command = parse_command(line, _REGISTERED | {_fold(self.token)})
            if command is not None and _fold(command[0]) == _fold(self.token):
                self.token = None
            return  # a resume past MAX_LINE is missed: the state stays stopped, which only costs a resume line
        command = parse_command(line, _REGISTERED)
        if command is None or _fold(command[0]) != _fold(_STOP):
            if mentions:
                self.lost = True  # a stop-commands past what was followed: its token is unknown
            return
        token = command[1]
        refused = not token or _fold(token) in _REGISTERED or _fold(token) == _fold("pause-logging")
        if refused and not self.allow_any_token:
            return  # the runner refuses the token (and fails the step); commands keep running
        if overlong or _resume_line(token) is None:
            self.lost = True
            return
        self.token = token

    def resume(self) -> bytes:
        """The line that makes the runner process commands again (empty when it does, or when ``lost``)."""
        line = None if self.token is None else _resume_line(self.token)
        return b"" if line is None else line.encode("utf-8", "replace")

    def stop(self, token: str) -> bytes:
        """The line that stops the runner again with ``token`` (empty when no line can)."""
        line = f"::{_STOP}::{token.replace('%', '%25')}\n"
        command = parse_command(line.rstrip("\n"), _REGISTERED)
        if command is None or command[1] != token or _resume_line(token) is None:
            return b""
        return line.encode("utf-8", "replace")


def _resume_line(token: str) -> str | None:
    """A line whose command is ``token`` for the runner while stopped by it (None when there is none)."""
    if not token or "\r" in token or "\n" in token:  # the runner never resumes an empty token
        return None
    registered = _REGISTERED | {_fold(token)}
    for line in (f"::{token}::", f"##[{token}]"):
        command = parse_command(line, registered)
        if command is not None and _fold(command[0]) == _fold(token):
            return line + "\n"
    return None
