"""A session's leaves and inclusion proof files (docs/FORMAT.md section 9).

A session commits to its members (node streams and sub-sessions) as the
leaves of an RFC 9162 tree (``aos.tlog``). A member's leaf data is a few
lines of text that name it and the stream it sealed; a sub-session's leaf also
states its own checkpoint (origin, size, root), so one path from a node stream
up to the top checkpoint is a chain of proofs, one per level, each checked by
hashing alone. A proof file holds one level: the origin of the tree, the
leaf's index, the tree's size and the audit path.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

from aos import tlog
from aos.refusals import StreamProof

__all__ = [
    "LEAF_MAGIC",
    "MAX_PROOF_BYTES",
    "NAME",
    "PROOF_MAGIC",
    "Member",
    "Proof",
    "parse_proof",
]

#: The first line of a leaf's data.
LEAF_MAGIC = "aos-session-leaf v1"
#: The first line of a proof file.
PROOF_MAGIC = "aos-inclusion-proof v1"
#: A member's name: a file name on every system, never hidden, never a path.
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")
#: A proof file is read only up to this: 64 hashes of a tree of 2**64 leaves fit many times.
MAX_PROOF_BYTES = 16 * 1024
_HEX64 = re.compile(r"[0-9a-f]{64}")
_STREAM_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class Member:
    """One leaf of a session: a node stream (``kind`` ``stream``) or a sub-session (``session``, with its
    checkpoint). ``head`` is the hash of the stream's seal event (the chain's last hash), ``file_blake3``
    BLAKE3 over the whole file, both in lowercase hex."""

    kind: str
    name: str
    stream_id: str
    file_blake3: str
    head: str
    checkpoint: tlog.Checkpoint | None = None

    def data(self) -> bytes:
        """Return the leaf data: LEAF_MAGIC, kind, name, stream id, file BLAKE3, head, and for a session its
        origin, size and base64 root, each a line ending in a newline (UTF-8)."""
        check_name(self.name)
        if not (_STREAM_ID.fullmatch(self.stream_id) and _HEX64.fullmatch(self.file_blake3)):
            raise StreamProof(f"member {self.name}: a stream id is 32 and a digest 64 lowercase hex digits")
        if not _HEX64.fullmatch(self.head):
            raise StreamProof(f"member {self.name}: a head is 64 lowercase hex digits")
        lines = [LEAF_MAGIC, self.kind, self.name, self.stream_id, self.file_blake3, self.head]
        if self.kind == "session":
            if self.checkpoint is None:
                raise StreamProof(f"member {self.name}: a session's leaf states its checkpoint")
            cp = self.checkpoint
            lines += [cp.origin, str(cp.size), base64.b64encode(cp.root).decode("ascii")]
        elif self.kind != "stream" or self.checkpoint is not None:
            raise StreamProof(f"member {self.name}: a leaf is of a stream or of a session")
        return "".join(line + "\n" for line in lines).encode()

    def leaf_hash(self) -> bytes:
        """Return the leaf's hash in the session's tree: ``SHA-256(0x00 || data)``."""
        return tlog.leaf_hash(self.data())


def check_name(name: str) -> None:
    """Raise ``StreamProof`` unless ``name`` is a member name (``NAME``)."""
    if not NAME.fullmatch(name):
        raise StreamProof(f"{name!r} is not a member name (letters, digits, '.', '_', '-'; at most 64; not hidden)")


@dataclass(frozen=True)
class Proof:
    """One level of a path: leaf ``index`` of the tree of ``size`` leaves of session ``origin``."""

    origin: str
    index: int
    size: int
    path: tuple[bytes, ...]

    def text(self) -> bytes:
        """Return the proof file: PROOF_MAGIC, origin, index, size, then one base64 hash a line (UTF-8)."""
        lines = [PROOF_MAGIC, self.origin, str(self.index), str(self.size)]
        lines += [base64.b64encode(h).decode("ascii") for h in self.path]
        return "".join(line + "\n" for line in lines).encode()

    def root(self, member: Member) -> bytes:
        """Return the root this proof gives for ``member``'s leaf (RFC 9162 2.1.3.2)."""
        return tlog.root_from_inclusion(self.index, self.size, member.leaf_hash(), self.path)

    def check(self, member: Member, checkpoint: tlog.Checkpoint) -> None:
        """Raise ``StreamProof`` unless this proof puts ``member`` in the tree ``checkpoint`` states."""
        if (self.origin, self.size) != (checkpoint.origin, checkpoint.size):
            raise StreamProof(
                f"member {member.name}: the proof is for {self.origin} of size {self.size}, the checkpoint "
                f"is {checkpoint.origin} of size {checkpoint.size}"
            )
        if self.root(member) != checkpoint.root:
            raise StreamProof(f"member {member.name}: its leaf does not reach the checkpoint's root")


def parse_proof(text: bytes) -> Proof:
    """Return the proof a proof file holds; raise ``StreamProof`` when it is not one."""
    if len(text) > MAX_PROOF_BYTES:
        raise StreamProof(f"a proof file is at most {MAX_PROOF_BYTES} bytes")
    try:
        lines = text.decode("ascii").split("\n")
    except UnicodeDecodeError:
        raise StreamProof("a proof file is ASCII") from None
    if len(lines) < 5 or lines[-1] != "" or lines[0] != PROOF_MAGIC:
        raise StreamProof(f"a proof file begins {PROOF_MAGIC!r} and every line ends in a newline")
    origin, index, size = lines[1:4]
    for value in (index, size):
        if not value.isdigit() or (value != "0" and value.startswith("0")):
            raise StreamProof(f"{value!r} is not a decimal number without leading zeros")
    tlog.Checkpoint(origin, int(size), b"").text()  # the origin's own rules
    path: list[bytes] = []
    for line in lines[4:-1]:
        try:
            raw = base64.b64decode(line, validate=True)
        except ValueError:
            raise StreamProof("a proof's hash is not base64") from None
        if len(raw) != tlog.HASH_SIZE or base64.b64encode(raw).decode("ascii") != line:
            raise StreamProof("a proof's hash is not 32 bytes in canonical base64")
        path.append(raw)
    return Proof(origin, int(index), int(size), tuple(path))
