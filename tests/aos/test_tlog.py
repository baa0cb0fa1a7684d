"""aos.tlog and aos.proofs against the published vectors of RFC 9162's tree, Go's signed notes and C2SP."""

from __future__ import annotations

import base64

import pytest

from aos import proofs, tlog
from tests.helpers.refusals import refused

# transparency-dev/merkle testonly/constants.go (LeafInputs, RootHashes, NodeHashes): the RFC 6962/9162
# reference tree of eight leaves, also in the Certificate Transparency reference implementations.
LEAF_INPUTS = [
    bytes.fromhex(h)
    for h in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f")
]
ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
# transparency-dev/merkle proof/verify_test.go, inclusionProofs: (1-based leaf, size, audit path).
INCLUSION = [
    (1, 1, []),
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (3, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        2,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]
# golang.org/x/mod sumdb/note/note_test.go (TestNewSigner, TestSign, TestOpen): a published test key.
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
PETER_TEXT = b"If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
PETER_SIG = (
    "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)
ENOCH_SIG = (
    "\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"
)


def _peter() -> tuple[bytes, bytes]:
    seed = base64.b64decode(PETER_SKEY.split("+", 4)[4])[1:]
    public = base64.b64decode(PETER_VKEY.split("+", 2)[2])[1:]
    return seed, public


class TestTree:
    """The tree's hashes and inclusion proofs are RFC 9162's."""

    def test_roots_of_the_reference_tree(self) -> None:
        """Every prefix of the reference leaves hashes to its published root, the empty tree included."""
        hashes = [tlog.leaf_hash(x) for x in LEAF_INPUTS]
        assert ROOTS == [tlog.tree_root(hashes[:n]).hex() for n in range(len(hashes) + 1)]

    def test_leaf_and_node_hash_vectors(self) -> None:
        """transparency-dev/merkle rfc6962_test.go: leaf "L123456" and node ("N123", "N456")."""
        assert "395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56" == tlog.leaf_hash(b"L123456").hex()
        assert (
            "aa217fe888e47007fa15edab33c2b492a722cb106c64667fc2b044444de66bbb" == tlog.node_hash(b"N123", b"N456").hex()
        )

    @pytest.mark.parametrize(("leaf", "size", "path"), INCLUSION)
    def test_published_inclusion_proofs(self, leaf: int, size: int, path: list[str]) -> None:
        """The audit path generated is the published one, and it gives the published root."""
        hashes = [tlog.leaf_hash(x) for x in LEAF_INPUTS[:size]]
        got = tlog.inclusion_proof(leaf - 1, hashes)
        assert path == [h.hex() for h in got]
        assert ROOTS[size] == tlog.root_from_inclusion(leaf - 1, size, hashes[leaf - 1], got).hex()

    def test_every_proof_of_every_size_reaches_the_root(self) -> None:
        """For every size up to 70 and every leaf, the generated path gives the tree's root, and no other leaf's."""
        hashes = [tlog.leaf_hash(i.to_bytes(2, "big")) for i in range(70)]
        for size in range(1, 71):
            root = tlog.tree_root(hashes[:size])
            for i in range(size):
                proof = tlog.inclusion_proof(i, hashes[:size])
                assert root == tlog.root_from_inclusion(i, size, hashes[i], proof)
                if size > 1:
                    assert root != tlog.root_from_inclusion(i, size, hashes[(i + 1) % size], proof)

    def test_forged_paths_are_refused(self) -> None:
        """A path one hash too long or too short, or a leaf outside the tree, is refused by name."""
        hashes = [tlog.leaf_hash(x) for x in LEAF_INPUTS]
        proof = tlog.inclusion_proof(2, hashes)
        assert "stream-proof" == refused(tlog.root_from_inclusion, 2, 8, hashes[2], [*proof, proof[0]]).name
        assert "stream-proof" == refused(tlog.root_from_inclusion, 2, 8, hashes[2], proof[:-1]).name
        assert "stream-proof" == refused(tlog.root_from_inclusion, 8, 8, hashes[2], proof).name
        assert "stream-proof" == refused(tlog.inclusion_proof, 8, hashes).name


class TestNote:
    """Signed notes and checkpoints are C2SP's, byte for byte."""

    def test_go_sign_vector(self) -> None:
        """Signing Go's text with Go's published key gives Go's published note, and its vkey."""
        seed, public = _peter()
        assert PETER_TEXT + b"\n" + PETER_SIG.encode() == tlog.sign_note(PETER_TEXT, "PeterNeumann", seed)
        assert PETER_VKEY == tlog.verifier_key("PeterNeumann", public)

    def test_open_skips_unknown_keys(self) -> None:
        """A note also signed by another key opens with this one; the other's line is skipped, as C2SP says."""
        _seed, public = _peter()
        note = PETER_TEXT + b"\n" + (PETER_SIG + ENOCH_SIG).encode()
        assert PETER_TEXT == tlog.open_note(note, "PeterNeumann", public)

    def test_forged_notes_are_refused(self) -> None:
        """A changed text, a changed signature, no signature of the key, or no blank line: each refused."""
        _seed, public = _peter()
        good = PETER_TEXT + b"\n" + PETER_SIG.encode()
        forged_text = good.replace(b"cryptography", b"cryptographs")
        forged_sig = PETER_TEXT + b"\n" + (PETER_SIG[:60] + "ABCD" + PETER_SIG[60:]).encode()
        for bad in (forged_text, forged_sig, PETER_TEXT + b"\n" + ENOCH_SIG.encode(), PETER_TEXT):
            assert "stream-proof" == refused(tlog.open_note, bad, "PeterNeumann", public).name

    def test_c2sp_checkpoint_example_parses(self) -> None:
        """The checkpoint of C2SP tlog-checkpoint's example parses to its origin, size and root, and back."""
        text = b"example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
        cp = tlog.parse_checkpoint(text)
        assert ("example.com/behind-the-sofa", 20852163) == (cp.origin, cp.size)
        assert text == cp.text()

    @pytest.mark.parametrize(
        "bad",
        [
            b"example.com/x\n012\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n",
            b"example.com/x\n12\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I\n",
            b"example.com/x\n12\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=",
            b"example com\n12\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n",
            b"example.com/x\n12\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\next\n",
        ],
    )
    def test_malformed_checkpoints_are_refused(self, bad: bytes) -> None:
        """A leading zero, a cut root, no final newline, a space in the origin, an extension line: refused."""
        assert "stream-proof" == refused(tlog.parse_checkpoint, bad).name


class TestLeaves:
    """Session leaves and proof files are FORMAT.md section 9's vectors."""

    STREAM = proofs.Member("stream", "node-0", "0" * 31 + "1", "ab" * 32, "cd" * 32)

    def test_leaf_vector(self) -> None:
        """The stream leaf of FORMAT.md 9.6 has the data and hash the page states."""
        assert (
            b"aos-session-leaf v1\nstream\nnode-0\n00000000000000000000000000000001\n" + b"ab" * 32 + b"\n" + b"cd" * 32
        ) + b"\n" == self.STREAM.data()
        assert "d821a35601a36937292075ab69eb9797f35b6bff30b30f73518ffd0d1d828eaf" == self.STREAM.leaf_hash().hex()

    def test_proof_file_round_trip_and_forgeries(self) -> None:
        """A proof file reads back to itself; a swapped leaf or a changed size does not reach the checkpoint."""
        other = proofs.Member("stream", "node-1", "0" * 31 + "2", "ef" * 32, "01" * 32)
        leaves = [self.STREAM.leaf_hash(), other.leaf_hash()]
        cp = tlog.Checkpoint("example.com/session/0001", 2, tlog.tree_root(leaves))
        proof = proofs.Proof(cp.origin, 1, 2, tuple(tlog.inclusion_proof(1, leaves)))
        assert proof == proofs.parse_proof(proof.text())
        proof.check(other, cp)
        assert "stream-proof" == refused(proof.check, self.STREAM, cp).name
        assert "stream-proof" == refused(proof.check, other, tlog.Checkpoint(cp.origin, 3, cp.root)).name
        assert "stream-proof" == refused(proofs.parse_proof, proof.text().replace(b"\n1\n", b"\n01\n", 1)).name
