"""A hostile recorded command: it tries to make the gate judge a stream it forged.

Run as the recorded command (``alpha observe gate ... -- python swap_stream.py MODE EXIT GATE``).
It knows ``$AOS_STREAM`` and ``$AOS_STREAM_ID``, as any recorded command does, and
forges a stream with the same id whose evidence passes GATE (``gates.testing``
builds it). Then, by MODE:

- ``swap``: hard-links the real file aside, renames the forgery onto ``$AOS_STREAM``
  and leaves a detached daemon that renames the real file back once it ends in
  the end-of-stream marker (after the recorder sealed it through its own fd).
- ``plant``: the same swap with a whole forgery, sealed and holding a ``pass``
  verdict of GATE, and no daemon: if nothing puts the recorder's stream back, the
  path is left holding the forgery (``alpha observe verdict PATH`` would print
  its ``pass``) and the real stream sits under the forger's name (``.real``).
- ``overwrite``: once the recorder has written a batch past the schema, rewrites
  the real file *in place* (same inode) with the forgery and leaves a daemon
  that writes the saved real bytes back over it once the recorder has sealed
  (so an inode check sees nothing).
- ``append``: appends the forgery's batches to the real file while it runs.
- ``truncate``: once a batch is written, truncates the real file to its schema.

Then it exits with EXIT. ``$ATTACK_DONE`` names a file the daemon creates when it
has finished (or given up), so a test can wait for it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def forge(path: Path, stream_id: str, gate: str, *, sealed: bool = False) -> None:
    """Write a stream of id ``stream_id`` whose evidence passes ``gate``; ``sealed``: with a pass verdict, sealed."""
    from aos.writer import StreamWriter
    from gates.testing import SyntheticStream, device_lane

    if gate == "exit-zero":
        s = SyntheticStream(gate=gate)
        s.exit(0)
    else:
        s = device_lane(gate)
    w = StreamWriter(path, stream_id=stream_id, background_flush=False)
    for op in s.ops:
        w.append(op["kind"], op["attrs"], op["data"], op["step"])
    if not sealed:
        w.close()  # unsealed: the recorder will "seal" it
        return
    verdict = s.evaluate(gate).to_attrs()
    verdict.update(verdict="pass", summary="pass")  # whatever the evidence gives, the forger says pass
    w.append("verdict", verdict)
    w.seal()


def daemon(work: callable, done: Path) -> None:  # type: ignore[valid-type]
    """Run ``work`` in a detached grandchild that holds none of the command's output."""
    if os.fork() > 0:
        return
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    Path(str(done) + ".pid").write_text(str(os.getpid()))  # so a test can tell a killed daemon from a slow one
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    try:
        work()
    finally:
        done.write_bytes(b"done")
        os._exit(0)


def wait_sealed(path: Path, limit: float = 20.0, *, past: int = 0) -> bool:
    """Whether the file at ``path`` ends with the end-of-stream marker within ``limit`` seconds, once longer than
    ``past`` bytes (a forgery written over a shorter stream ends with its own marker: not the recorder's)."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            with open(path, "rb") as f:
                if f.seek(0, os.SEEK_END) > past:
                    f.seek(-8, os.SEEK_END)
                    if f.read(8) == EOS:
                        return True
        except OSError:
            pass
        time.sleep(0.02)
    return False


def main() -> int:
    mode, code, gate = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    stream = Path(os.environ["AOS_STREAM"])
    stream_id = os.environ["AOS_STREAM_ID"]
    done = Path(os.environ["ATTACK_DONE"])
    forged = stream.with_name(stream.name + ".forged")
    forge(forged, stream_id, gate, sealed=mode == "plant")
    if mode == "plant":
        os.link(stream, stream.with_name(stream.name + ".real"))
        os.rename(forged, stream)
        done.write_bytes(b"done")
    elif mode == "swap":
        real = stream.with_name(stream.name + ".real")
        os.link(stream, real)
        os.rename(forged, stream)

        def restore() -> None:
            if wait_sealed(real):
                os.rename(real, stream)

        daemon(restore, done)
    elif mode == "overwrite":
        saved = _first_batch(stream)  # the forgery then covers bytes the recorder wrote, not only its schema
        fake = forged.read_bytes()
        with open(stream, "r+b") as f:
            f.write(fake)
        os.unlink(forged)

        def put_back() -> None:
            if wait_sealed(stream, past=len(fake)):
                size = stream.stat().st_size
                with open(stream, "r+b") as f:
                    f.write(saved)
                    # the recorder wrote its later batches past ``saved``; the forgery may
                    # have been longer than ``saved`` and left bytes the recorder never overwrote
                    f.truncate(size)

        daemon(put_back, done)
    elif mode == "append":
        body = forged.read_bytes()
        schema_end = _schema_end(body)
        with open(stream, "ab") as f:
            f.write(body[schema_end:])
        done.write_bytes(b"done")
    elif mode == "truncate":
        os.truncate(stream, _schema_end(_first_batch(stream)))
        done.write_bytes(b"done")
    else:
        raise SystemExit(f"unknown mode {mode}")
    return code


def _first_batch(stream: Path, limit: float = 10.0) -> bytes:
    """The stream's bytes once the recorder has written a batch past its schema (or after ``limit`` seconds)."""
    body = stream.read_bytes()
    end = time.monotonic() + limit
    while len(body) <= _schema_end(body) and time.monotonic() < end:
        time.sleep(0.02)
        body = stream.read_bytes()
    return body


def _schema_end(body: bytes) -> int:
    import struct

    (meta_len,) = struct.unpack("<i", body[4:8])
    return 8 + meta_len


if __name__ == "__main__":
    sys.exit(main())
