"""Ed25519 keys, signed seals and signed checkpoints."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from aos.refusals import Refusal, StreamSignature
from aos.signing import generate_keypair, load_public_key, load_signer
from aos.verify import verify_stream
from aos.writer import StreamWriter


def signed_stream(path: Path, key: Path, *, checkpoints: bool = False) -> None:
    """Write a small stream signed by ``key`` (with a checkpoint closing every batch when asked)."""
    w = StreamWriter(
        path,
        signer=load_signer(key),
        checkpoint_interval=0.0 if checkpoints else float("inf"),
        batch_max_events=2,
        background_flush=False,
    )
    for i in range(7):
        w.append("stdout", {"i": i}, b"line %d\n" % i)
    w.seal()


def refusal_name(path: Path, pub: Path | None) -> str | None:
    """The name of the refusal verify gives (None when it accepts)."""
    try:
        verify_stream(path, load_public_key(pub) if pub else None)
    except Refusal as exc:
        return exc.name
    return None


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two fresh key pairs: PREFIX 'a' and PREFIX 'b'."""
    d = tmp_path_factory.mktemp("keys")
    generate_keypair(d / "a")
    generate_keypair(d / "b")
    return d / "a", d / "b"


class TestKeygen:
    """aos.signing.generate_keypair (what `alpha observe keygen PREFIX` runs)."""

    def test_writes_private_0600_and_public(self, tmp_path: Path) -> None:
        """keygen writes PREFIX.key with mode 0600 and PREFIX.pub, both PEM."""
        key, pub = generate_keypair(tmp_path / "k")
        assert (tmp_path / "k.key", tmp_path / "k.pub") == (key, pub)
        assert 0o600 == stat.S_IMODE(key.stat().st_mode)
        assert key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
        assert pub.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")

    def test_keys_match(self, tmp_path: Path) -> None:
        """The private and public key written together share one key id."""
        key, pub = generate_keypair(tmp_path / "k")
        assert load_signer(key).key_id == load_public_key(pub).key_id

    def test_refuses_to_overwrite_a_private_key(self, tmp_path: Path) -> None:
        """keygen never overwrites an existing private key."""
        key, _ = generate_keypair(tmp_path / "k")
        before = key.read_bytes()
        with pytest.raises(FileExistsError):
            generate_keypair(tmp_path / "k")
        assert before == key.read_bytes()

    def test_each_key_is_new(self, tmp_path: Path) -> None:
        """Two key pairs generated in a row differ."""
        generate_keypair(tmp_path / "x")
        generate_keypair(tmp_path / "y")
        assert load_public_key(tmp_path / "x.pub").key_id != load_public_key(tmp_path / "y.pub").key_id

    @pytest.mark.parametrize(
        "content", [b"", b"garbage", b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"]
    )
    def test_bad_key_files_are_refused(self, tmp_path: Path, content: bytes) -> None:
        """Unreadable or malformed key files are a stream-signature refusal, never a traceback."""
        bad = tmp_path / "bad.pem"
        bad.write_bytes(content)
        names = []
        for load in (load_signer, load_public_key):
            with pytest.raises(StreamSignature) as info:
                load(bad)
            names.append(info.value.name)
        assert ["stream-signature"] * 2 == names

    def test_wrong_kind_of_key_is_refused(self, keys: tuple[Path, Path], tmp_path: Path) -> None:
        """A public key given as private (and vice versa), or a missing file, is refused by name."""
        a, _ = keys
        with pytest.raises(StreamSignature):
            load_signer(a.with_suffix(".pub"))
        with pytest.raises(StreamSignature):
            load_public_key(a.with_suffix(".key"))
        with pytest.raises(StreamSignature):
            load_public_key(tmp_path / "missing.pub")

    def test_non_ed25519_key_is_refused(self, tmp_path: Path) -> None:
        """An EC key in PEM is refused as not Ed25519."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        private = ec.generate_private_key(ec.SECP256R1())
        (tmp_path / "ec.key").write_bytes(
            private.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        (tmp_path / "ec.pub").write_bytes(
            private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        with pytest.raises(StreamSignature):
            load_signer(tmp_path / "ec.key")
        with pytest.raises(StreamSignature):
            load_public_key(tmp_path / "ec.pub")


class TestSignedSeal:
    """A seal signed with --sign-key, checked with --key."""

    def test_verifies_with_its_key(self, keys: tuple[Path, Path], tmp_path: Path) -> None:
        """A signed stream verifies with its public key, and says which key signed it."""
        a, _ = keys
        path = tmp_path / "s.aos"
        signed_stream(path, a.with_suffix(".key"))
        v = verify_stream(path, load_public_key(a.with_suffix(".pub")))
        assert (True, True, load_public_key(a.with_suffix(".pub")).key_id) == (v.signed, v.signature_checked, v.key_id)

    def test_verifies_without_a_key(self, keys: tuple[Path, Path], tmp_path: Path) -> None:
        """Without --key a signed stream verifies, its signature unchecked."""
        a, _ = keys
        path = tmp_path / "s.aos"
        signed_stream(path, a.with_suffix(".key"))
        v = verify_stream(path)
        assert (True, False) == (v.signed, v.signature_checked)

    def test_refused_with_another_key(self, keys: tuple[Path, Path], tmp_path: Path) -> None:
        """A stream signed by one key is stream-signature when checked with another."""
        a, b = keys
        path = tmp_path / "s.aos"
        signed_stream(path, a.with_suffix(".key"))
        assert "stream-signature" == refusal_name(path, b.with_suffix(".pub"))

    def test_unsigned_refused_with_a_key(self, keys: tuple[Path, Path], tmp_path: Path) -> None:
        """An unsigned stream is stream-signature when a key is given."""
        a, _ = keys
        path = tmp_path / "s.aos"
        w = StreamWriter(path, background_flush=False)
        w.append("stdout", {}, b"x")
        w.seal()
        assert (None, "stream-signature") == (refusal_name(path, None), refusal_name(path, a.with_suffix(".pub")))

    def test_seal_signature_fields(self, keys: tuple[Path, Path], tmp_path: Path) -> None:
        """The seal carries a 64-byte hex signature and the signer's key id; SealInfo says the same."""
        a, _ = keys
        path = tmp_path / "s.aos"
        w = StreamWriter(path, signer=load_signer(a.with_suffix(".key")), background_flush=False)
        w.append("stdout", {}, b"x")
        info = w.seal()
        seal = verify_stream(path).seal
        assert (128, info.signature, info.key_id) == (len(seal["signature"]), seal["signature"], seal["key_id"])

    def test_asset_forged_seal(self, asset: Callable[[str], Path]) -> None:
        """The committed forged-seal asset: accepted unchecked, refused with the signer's key."""
        assert (None, "stream-signature", None) == (
            refusal_name(asset("forged-seal.aos"), None),
            refusal_name(asset("forged-seal.aos"), asset("signer.pub")),
            refusal_name(asset("good-signed.aos"), asset("signer.pub")),
        )


class TestSignedCheckpoints:
    """Checkpoints carry signatures too, so an unsealed stream can be trusted up to its last checkpoint."""

    def test_checkpoints_signed_and_verified(self, keys: tuple[Path, Path], tmp_path: Path) -> None:
        """Every checkpoint of a signed stream is signed by the stream's key, and verify checks them."""
        a, _ = keys
        path = tmp_path / "s.aos"
        signed_stream(path, a.with_suffix(".key"), checkpoints=True)
        v = verify_stream(path, load_public_key(a.with_suffix(".pub")))
        from aos.reader import read_stream

        cps = [e for e in read_stream(path).events if e.kind == "checkpoint"]
        assert (True, v.checkpoints) == (len(cps) >= 3, len(cps))
        assert {v.key_id} == {c.attrs["key_id"] for c in cps}

    def test_forged_checkpoint_in_unsealed_stream(
        self, keys: tuple[Path, Path], surgery: ModuleType, tmp_path: Path
    ) -> None:
        """A checkpoint re-signed by another key is stream-signature even before any seal is reached."""
        a, b = keys
        path = tmp_path / "s.aos"
        signed_stream(path, a.with_suffix(".key"), checkpoints=True)
        parts = surgery.split(path)
        rows = surgery.all_rows(parts)
        first = rows[0]
        assert "checkpoint" == first[-1]["kind"]
        attrs = json.loads(first[-1]["attrs"])
        attrs["signature"] = load_signer(b.with_suffix(".key")).sign(b"anything")
        first[-1]["attrs"] = json.dumps(attrs, sort_keys=True, separators=(",", ":"))
        surgery.rehash(first, surgery.genesis(parts.stream_id))
        target = tmp_path / "forged.aos"
        target.write_bytes(parts.head + surgery.encode_batch(first, parts.stream_id))
        assert ("stream-unsealed", "stream-signature") == (
            refusal_name(target, None),
            refusal_name(target, a.with_suffix(".pub")),
        )

    def test_unsigned_checkpoints_refused_with_a_key(self, keys: tuple[Path, Path], tmp_path: Path) -> None:
        """Checkpoints without a signature are stream-signature when a key is given (even unsealed)."""
        a, _ = keys
        path = tmp_path / "s.aos"
        w = StreamWriter(path, checkpoint_interval=0.0, batch_max_events=2, background_flush=False)
        for i in range(4):
            w.append("stdout", {}, b"%d" % i)
        w.close()
        assert ("stream-unsealed", "stream-signature") == (
            refusal_name(path, None),
            refusal_name(path, a.with_suffix(".pub")),
        )
