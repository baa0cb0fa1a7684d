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

__all__ = ["Signer", "Verifier", "generate_keypair", "key_id", "load_public_key", "load_signer"]


def key_id(public: Ed25519PublicKey) -> str:
    """A short stable name for a public key."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return blake3(raw).digest()[:16].hex()


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


def _read_key(path: str | os.PathLike[str]) -> bytes:
    """A key file's bytes; never blocks on a FIFO or a device (``stream-signature`` for those)."""
    from aos.reader import open_regular
    from aos.refusals import StreamMissing

    try:
        fd = open_regular(path)
    except StreamMissing as exc:
        raise StreamSignature(f"cannot load key: {exc.detail}") from None
    with os.fdopen(fd, "rb") as f:
        return f.read(1 << 20)


def load_signer(path: str | os.PathLike[str]) -> Signer:
    """Load an Ed25519 private key; a bad file is a ``stream-signature`` refusal."""
    try:
        key = serialization.load_pem_private_key(_read_key(path), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise StreamSignature(f"cannot load private key {path}: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise StreamSignature(f"{path} is not an Ed25519 private key")
    return Signer(key)


def load_public_key(path: str | os.PathLike[str]) -> Verifier:
    """Load an Ed25519 public key; a bad file is a ``stream-signature`` refusal."""
    try:
        key = serialization.load_pem_public_key(_read_key(path))
    except (OSError, ValueError, TypeError) as exc:
        raise StreamSignature(f"cannot load public key {path}: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise StreamSignature(f"{path} is not an Ed25519 public key")
    return Verifier(key)
