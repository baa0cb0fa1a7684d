"""A node's command that tries to take its node recorder's signing key (docs/NODES.md's fleet recipes).

Run as the command a node recorder records (``python3 node_key_probe.py ...``; standard library only, so any
Python runs it, as any account). It tries what a command on the node could do to sign a stream of its own as
that node: read the key file (``--key-file``), find the key in its own environment, and in its recorder's
(the ``alpha ... observe`` process it descends from) ``/proc/PID/environ`` and ``/proc/PID/mem``; and, beyond
its recorder, in every process of its own account (another account's /proc entries are closed to it; another
node's probe, running beside it, for its environment only: its memory holds what it read). It writes what it
found to ``--report`` as JSON::

    {"uid": N, "key_file": "read" | "denied: ERROR", "own_environ": bool, "recorder": PID | null,
     "recorder_command": ["observe", "node", NAME] | null,
     "recorder_environ": "held" | "clean" | "denied: ERROR", "recorder_memory": "held" | "clean" | "denied",
     "holders": [{"pid": N, "where": "environ" | "memory"}], "scanned": N}

The key's bytes are given hex-encoded (``--needle-hex``), so that the command line that carries them never
holds the needle itself; tests/helpers/key_probe.py is the same probe for the CI templates' jobs (its
memory scan is this one's: copy it beside this file).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

try:  # imported by the suite
    from tests.helpers.key_probe import cmdline, in_memory
except ImportError:  # run as a script, key_probe.py copied beside it (tests/helpers/key_reach.py)
    from key_probe import cmdline, in_memory  # type: ignore[import-not-found,no-redef]


def _ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(text[text.rindex(")") + 2 :].split()[1])
        out.append(pid)
    return out


def _is_recorder(cmdline: list[str]) -> bool:
    """``alpha observe ...``: the console script, or the shim a recording hands its command (``python -I -c
    '...observe.cli.entry...' observe ...``: a session's launcher finds that ``alpha`` first on its PATH)."""
    alpha = any(Path(a).name == "alpha" for a in cmdline[:2]) or any("observe.cli.entry" in a for a in cmdline[:4])
    return alpha and "observe" in cmdline


def _is_probe(words: list[str]) -> bool:
    """Whether a process runs this probe (for another node: the suite's probes run at once on one machine)."""
    return any(Path(w).name == Path(__file__).name for w in words[:3])


def _command(pid: int) -> list[str]:
    """The recorder's command: ``["observe", "node", NAME]`` for a node recorder (its words from ``observe``)."""
    words = cmdline(pid)
    return words[words.index("observe") :][:3]


def _environ(pid: int, needle: bytes) -> str:
    try:
        return "held" if needle in Path(f"/proc/{pid}/environ").read_bytes() else "clean"
    except OSError as e:
        return f"denied: {type(e).__name__}"


def _memory(pid: int, needle: bytes) -> str:
    """``held`` when the process's readable memory holds ``needle``, ``clean``, or ``denied`` (not readable)."""
    return {True: "held", False: "clean", None: "denied"}[in_memory(pid, needle)]


def command(probe: Path, key: Path, report: Path) -> str:
    """The shell words that run ``probe`` (this file, where the command's account can read it) against the
    private key file ``key`` (the needle: its PEM's base64 line, the key's own bytes), reporting to ``report``."""
    needle = key.read_bytes().splitlines()[1]
    return f"python3 {probe} --needle-hex {needle.hex()} --key-file {key} --report {report}"


def out_of_reach(uid: int, node: str) -> dict[str, object]:
    """What the probe reports, run as account ``uid`` under node ``node``'s recorder, when that node's key is out
    of its reach (``recorder`` and ``scanned`` aside: its pid, and how many processes of its account it read)."""
    return {
        "uid": uid,
        "recorder_command": ["observe", "node", node],
        "key_file": "denied: PermissionError",
        "own_environ": False,
        "recorder_environ": "denied: PermissionError",
        "recorder_memory": "denied",
        "holders": [],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--needle-hex", required=True)
    parser.add_argument("--key-file", required=True, type=Path)
    parser.add_argument("--report", required=True, type=Path)
    args = parser.parse_args()
    needle = bytes.fromhex(args.needle_hex)
    try:
        key_file = "read" if needle in args.key_file.read_bytes() else "read: no key in it"
    except OSError as e:
        key_file = f"denied: {type(e).__name__}"
    own = any(needle in os.fsencode(v) for v in os.environ.values())
    me = os.getpid()
    recorder = next((p for p in _ancestors(me) if _is_recorder(cmdline(p))), None)
    holders = []
    scanned = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        try:
            if os.stat(f"/proc/{pid}").st_uid != os.getuid():  # another account's: /proc keeps it from a non-root
                continue
        except OSError:
            continue
        scanned += 1
        if _environ(pid, needle) == "held":
            holders.append({"pid": pid, "where": "environ"})
        # Another node's probe is read for its environment only: its memory holds what it read of this probe's
        # (this probe's needle among it) while the two ran side by side, as the suite's nodes share one machine.
        if not _is_probe(cmdline(pid)) and _memory(pid, needle) == "held":
            holders.append({"pid": pid, "where": "memory"})
    report = {
        "uid": os.getuid(),
        "key_file": key_file,
        "own_environ": own,
        "recorder": recorder,
        "recorder_command": _command(recorder) if recorder else None,
        "recorder_environ": _environ(recorder, needle) if recorder else None,
        "recorder_memory": _memory(recorder, needle) if recorder else None,
        "holders": holders,
        "scanned": scanned,
    }
    args.report.write_text(json.dumps(report))


if __name__ == "__main__":
    main()
