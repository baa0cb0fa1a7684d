"""Merkle trees, inclusion proofs and signed checkpoints as transparency logs make them.

The tree is RFC 9162's (section 2.1, the same as RFC 6962's): SHA-256, a leaf
hashed as ``SHA-256(0x00 || data)``, an interior node as ``SHA-256(0x01 ||
left || right)``, the split at the largest power of two below the size; the
empty tree's hash is ``SHA-256("")``. SHA-256 and not the chain's BLAKE3, so
that a standard transparency-log verifier (Go's ``golang.org/x/mod/sumdb/tlog``,
``transparency-dev/merkle``) checks the same proofs. A checkpoint is C2SP's
``tlog-checkpoint`` (origin line, decimal size, base64 root hash), signed as a
C2SP ``signed-note`` with Ed25519. docs/FORMAT.md section 9 states all of it to
the byte; the tests check RFC 9162's and Go's published vectors, and an
independent verifier written from that text alone.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from aos.refusals import StreamProof

__all__ = [
    "HASH_SIZE",
    "Checkpoint",
    "empty_root",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "note_key_id",
    "open_note",
    "parse_checkpoint",
    "root_from_inclusion",
    "sign_note",
    "tree_root",
    "verifier_key",
]

#: Bytes of one hash (SHA-256).
HASH_SIZE = 32
#: The signed-note signature type of Ed25519 (C2SP signed-note, "Signature types").
ED25519_TYPE = 0x01
#: The most signature lines a note may carry; C2SP asks verifiers to accept at least 16.
MAX_SIGNATURES = 16
#: A longer note is refused unread (its text is three short lines; its signatures under 100 bytes each).
MAX_NOTE_BYTES = 64 * 1024
_DASH = "\u2014 "


def leaf_hash(data: bytes) -> bytes:
    """Return RFC 9162's leaf hash: ``SHA-256(0x00 || data)``."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """Return RFC 9162's interior node hash: ``SHA-256(0x01 || left || right)``."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def empty_root() -> bytes:
    """Return the hash of the empty tree: ``SHA-256("")``."""
    return hashlib.sha256(b"").digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (``n`` > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


def tree_root(leaves: Sequence[bytes]) -> bytes:
    """Return the Merkle tree hash of ``leaves`` (leaf hashes, in order), RFC 9162 2.1.1.

    Computed bottom up with one list of at most ``len(leaves)`` hashes: pairing
    neighbours level by level and carrying an odd last node up unchanged gives
    the same tree as the recursive split.
    """
    if not leaves:
        return empty_root()
    level = list(leaves)
    while len(level) > 1:
        paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def inclusion_proof(index: int, leaves: Sequence[bytes]) -> list[bytes]:
    """Return the audit path of leaf ``index`` in the tree of ``leaves`` (leaf hashes), RFC 9162 2.1.3.1.

    Raise ``StreamProof`` for an index outside the tree.
    """
    if not 0 <= index < len(leaves):
        raise StreamProof(f"leaf index {index} is outside a tree of size {len(leaves)}")
    path: list[bytes] = []
    lo, hi, m = 0, len(leaves), index
    bounds: list[tuple[int, int]] = []
    while hi - lo > 1:
        k = _split(hi - lo)
        if m < k:
            bounds.append((lo + k, hi))  # the sibling is the right subtree
            hi = lo + k
        else:
            bounds.append((lo, lo + k))
            lo, m = lo + k, m - k
    for a, b in reversed(bounds):
        path.append(tree_root(leaves[a:b]))
    return path


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """Return the root that ``proof`` gives for leaf hash ``leaf`` at ``index`` in a tree of ``size``.

    RFC 9162 2.1.3.2's verification algorithm. Raise ``StreamProof`` for an
    index outside the tree, a hash of the wrong length, or a path of the wrong
    length for that index and size.
    """
    if not 0 <= index < size:
        raise StreamProof(f"leaf index {index} is outside a tree of size {size}")
    if any(len(h) != HASH_SIZE for h in (leaf, *proof)):
        raise StreamProof("a hash in the proof is not 32 bytes")
    fn, sn = index, size - 1
    r = leaf
    for p in proof:
        if sn == 0:
            raise StreamProof(f"the proof is longer than a path of leaf {index} in a tree of size {size}")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise StreamProof(f"the proof is shorter than a path of leaf {index} in a tree of size {size}")
    return r


@dataclass(frozen=True)
class Checkpoint:
    """A C2SP ``tlog-checkpoint`` note text: the origin, the tree size and its root hash."""

    origin: str
    size: int
    root: bytes

    def text(self) -> bytes:
        """Return the note text: ``origin\\nsize\\nbase64(root)\\n`` (UTF-8)."""
        _check_name(self.origin, "origin")
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode('ascii')}\n".encode()


def parse_checkpoint(text: bytes) -> Checkpoint:
    """Return the checkpoint a note text states; raise ``StreamProof`` when it is not one.

    Extension lines after the third are refused: this project writes none.
    """
    try:
        lines = text.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        raise StreamProof("the checkpoint is not UTF-8") from None
    if len(lines) != 4 or lines[3] != "":
        raise StreamProof("a checkpoint is exactly three lines, each ending in a newline")
    origin, size, root = lines[:3]
    _check_name(origin, "origin")
    if not size.isascii() or not size.isdigit() or (size != "0" and size.startswith("0")):
        raise StreamProof(f"the checkpoint's size {size!r} is not a decimal number without leading zeros")
    digest = _b64(root, "the checkpoint's root hash")
    if len(digest) != HASH_SIZE:
        raise StreamProof("the checkpoint's root hash is not 32 bytes")
    return Checkpoint(origin, int(size), digest)


def _b64(text: str, what: str) -> bytes:
    """Strict standard base64 (padded, no whitespace) or ``StreamProof``."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise StreamProof(f"{what} is not base64") from None
    if base64.b64encode(raw).decode("ascii") != text:
        raise StreamProof(f"{what} is not canonical base64")
    return raw


def _check_name(name: str, what: str) -> None:
    """A note key name (and a checkpoint's origin): non-empty, no spaces, no ``+``, no control characters."""
    if not name or any(c.isspace() or c == "+" or ord(c) < 0x20 for c in name):
        raise StreamProof(f"the {what} {name!r} is empty or holds a space, a '+' or a control character")


def note_key_id(name: str, public_raw: bytes) -> bytes:
    """Return the 4-byte key id of an Ed25519 note key: ``SHA-256(name || 0x0A || 0x01 || public)[:4]``."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([ED25519_TYPE]) + public_raw).digest()[:4]


def verifier_key(name: str, public_raw: bytes) -> str:
    """Return the note verifier key ``name+hex(key id)+base64(0x01 || public)``, as Go's ``note`` writes it."""
    _check_name(name, "key name")
    kid = note_key_id(name, public_raw)
    return f"{name}+{kid.hex()}+{base64.b64encode(bytes([ED25519_TYPE]) + public_raw).decode('ascii')}"


def _check_text(text: bytes) -> str:
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError:
        raise StreamProof("a note is UTF-8") from None
    if not decoded.endswith("\n") or any(ord(c) < 0x20 and c != "\n" for c in decoded):
        raise StreamProof("a note's text ends in a newline and holds no control character but newlines")
    return decoded


def sign_note(text: bytes, name: str, private_raw: bytes) -> bytes:
    """Return ``text`` signed as a C2SP signed note by the Ed25519 key of 32-byte seed ``private_raw``.

    The note is the text, a blank line, and ``— NAME base64(key id || signature)``.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    _check_text(text)
    _check_name(name, "key name")
    key = Ed25519PrivateKey.from_private_bytes(private_raw)
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    signature = note_key_id(name, public) + key.sign(text)
    return text + b"\n" + f"{_DASH}{name} {base64.b64encode(signature).decode('ascii')}\n".encode()


def open_note(note: bytes, name: str, public_raw: bytes) -> bytes:
    """Return the text of signed note ``note`` after checking its signature by key ``name`` / ``public_raw``.

    Signatures of other keys (another name or key id) are skipped, as C2SP says;
    a signature of this key that does not verify, or none of it at all, is
    refused (``StreamProof``), as is a note that is not one.
    """
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if len(note) > MAX_NOTE_BYTES:
        raise StreamProof(f"the note is over {MAX_NOTE_BYTES} bytes")
    decoded = _check_text(note)
    split = decoded.rfind("\n\n")
    if split < 0:
        raise StreamProof("the note has no blank line before its signatures")
    text, lines = decoded[: split + 1], decoded[split + 2 :].split("\n")
    if lines[-1] != "" or len(lines) < 2:
        raise StreamProof("the note's signature lines do not each end in a newline")
    if len(lines) - 1 > MAX_SIGNATURES:
        raise StreamProof(f"the note has over {MAX_SIGNATURES} signatures")
    kid = note_key_id(name, public_raw)
    found = False
    for line in lines[:-1]:
        if not line.startswith(_DASH):
            raise StreamProof(f"a signature line does not begin with an em dash and a space: {line[:40]!r}")
        who, sep, sig64 = line[len(_DASH) :].partition(" ")
        _check_name(who, "signature's key name")
        raw = _b64(sig64, "a signature") if sep else b""
        if len(raw) < 4:
            raise StreamProof("a signature is shorter than its key id")
        if who != name or raw[:4] != kid:
            continue
        try:
            Ed25519PublicKey.from_public_bytes(public_raw).verify(raw[4:], text.encode())
        except InvalidSignature:
            raise StreamProof(f"the signature of {name}+{kid.hex()} does not verify") from None
        found = True
    if not found:
        raise StreamProof(f"the note carries no signature of {name}+{kid.hex()}")
    return text.encode()
