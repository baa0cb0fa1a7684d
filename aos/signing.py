"""Ed25519 keys for seals and checkpoints (via ``cryptography``).

Keys are PEM: PKCS#8 private keys (written mode 0600) and SubjectPublicKeyInfo
public keys. A key's id is the first 16 bytes of BLAKE3 over its raw 32-byte
public key, in hex.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from blake3 import blake3
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from aos.refusals import StreamSignature

__all__ = [
    "Signer",
    "Verifier",
    "generate_keypair",
    "key_id",
    "load_key",
    "load_public_key",
    "load_signer",
    "raw_public",
    "signer_from_pem",
    "verifier_from_raw",
]


def key_id(public: Ed25519PublicKey) -> str:
    """A short stable name for a public key."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return blake3(raw).digest()[:16].hex()


def raw_public(public: Ed25519PublicKey) -> str:
    """The raw 32-byte public key, in hex (64 lowercase digits)."""
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def verifier_from_raw(raw_hex: object) -> Verifier:
    """The ``Verifier`` of a raw public key in hex (``raw_public``); anything else is a ``stream-signature``
    refusal."""
    try:
        if not isinstance(raw_hex, str) or len(raw_hex) != 64:
            raise ValueError("not 64 hex digits")
        return Verifier(Ed25519PublicKey.from_public_bytes(bytes.fromhex(raw_hex)))
    except ValueError as exc:
        raise StreamSignature(f"{raw_hex!r} is not a raw Ed25519 public key in hex: {exc}") from None


@dataclass(frozen=True)
class Signer:
    """Signs seal and checkpoint messages."""

    private: Ed25519PrivateKey

    @property
    def key_id(self) -> str:
        return key_id(self.private.public_key())

    def sign(self, message: bytes) -> str:
        """The hex signature of ``message``."""
        return self.private.sign(message).hex()


@dataclass(frozen=True)
class Verifier:
    """Checks signatures made by one public key."""

    public: Ed25519PublicKey

    @property
    def key_id(self) -> str:
        return key_id(self.public)

    def check(self, message: bytes, signature_hex: object) -> bool:
        """True when ``signature_hex`` is this key's signature of ``message``."""
        if not isinstance(signature_hex, str):
            return False
        try:
            self.public.verify(bytes.fromhex(signature_hex), message)
        except (InvalidSignature, ValueError):
            return False
        return True


def generate_keypair(prefix: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write PREFIX.key (mode 0600, created so) and PREFIX.pub; return both paths."""
    base = str(prefix)
    key_path, pub_path = Path(base + ".key"), Path(base + ".pub")
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    pub_path.write_bytes(
        private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return key_path, pub_path


#: The most bytes read from a key file or pipe (a PEM key is a few hundred).
KEY_MAX_BYTES = 1 << 20
#: How long a key given through a pipe may take to arrive (``--sign-key <(vault read ...)``).
PIPE_WAIT_S = 10.0


def _read_key(path: str | os.PathLike[str]) -> bytes:
    """A key's bytes, from a regular file or a pipe (``<(...)``, ``/dev/fd/N``, a FIFO with a writer).

    Never blocks for long: a pipe is read until its end within ``PIPE_WAIT_S``; a FIFO
    nobody writes to reads as empty; a device, a directory or a terminal is refused
    (``stream-signature``) without reading it.
    """
    import select
    import stat
    import time

    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise StreamSignature(f"cannot load key: {path}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            return os.read(fd, KEY_MAX_BYTES)
        if not stat.S_ISFIFO(mode):
            raise StreamSignature(f"cannot load key: {path} is neither a file nor a pipe")
        data = bytearray()
        deadline = time.monotonic() + PIPE_WAIT_S
        while len(data) < KEY_MAX_BYTES:
            try:  # read first: a FIFO that no writer holds open reads as its end at once
                chunk = os.read(fd, KEY_MAX_BYTES - len(data))
            except BlockingIOError:  # a writer, nothing written yet
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise StreamSignature(
                        f"cannot load key: nothing ended the pipe {path} within {PIPE_WAIT_S:g} s"
                    ) from None
                continue
            if not chunk:
                break
            data += chunk
        return bytes(data)
    except OSError as exc:
        raise StreamSignature(f"cannot load key: {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def signer_from_pem(pem: bytes, where: str) -> Signer:
    """An Ed25519 private key from its PEM bytes; anything else is a ``stream-signature`` refusal naming ``where``."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise StreamSignature(f"cannot load private key {where}: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise StreamSignature(f"{where} is not an Ed25519 private key")
    return Signer(key)


def load_signer(path: str | os.PathLike[str]) -> Signer:
    """Load an Ed25519 private key from a file or a pipe; a bad one is a ``stream-signature`` refusal."""
    pem = _read_key(path)
    if not pem.strip():
        raise StreamSignature(f"cannot load private key {path}: it holds nothing (a pipe nobody wrote to?)")
    return signer_from_pem(pem, str(path))


def load_key(path: str | os.PathLike[str]) -> Signer | Verifier:
    """Load an Ed25519 key that may be either half (read once: a pipe too): a ``Signer`` for a private key,
    a ``Verifier`` for a public one; anything else is a ``stream-signature`` refusal."""
    pem = _read_key(path)
    if b"PRIVATE KEY-----" in pem:
        return signer_from_pem(pem, str(path))
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError) as exc:
        raise StreamSignature(f"cannot load public key {path}: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise StreamSignature(f"{path} is not an Ed25519 public key")
    return Verifier(key)


def load_public_key(path: str | os.PathLike[str]) -> Verifier:
    """Load an Ed25519 public key; a bad file is a ``stream-signature`` refusal."""
    try:
        key = serialization.load_pem_public_key(_read_key(path))
    except (OSError, ValueError, TypeError) as exc:
        raise StreamSignature(f"cannot load public key {path}: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise StreamSignature(f"{path} is not an Ed25519 public key")
    return Verifier(key)
