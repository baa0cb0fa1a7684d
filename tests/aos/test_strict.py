"""The format checked strictly (issue 11): nulls, metadata, counts, keys, non-files, damage or cut, numbers."""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from aos.canonical import canonical_json, es_number, parse_canonical
from aos.chain import genesis
from aos.reader import read_stream
from aos.refusals import Refusal
from aos.signing import load_public_key
from aos.verify import verify_stream
from tests.helpers.paths import ASSETS
from tests.helpers.refusals import verify_refused
from tests.helpers.run import alpha

MANIFEST = json.loads((ASSETS / "MANIFEST.json").read_text())
NULLS = sorted(n for n in MANIFEST if n.startswith("null-"))
#: Every read command, with the options that make it finish on its own.
READ_COMMANDS = (
    ("verify",),
    ("read",),
    ("read", "--json"),
    ("read", "--stdout"),
    ("read", "--stderr"),
    ("read", "--artifact", "out/résumé.txt"),
    ("read", "--kind", "stdout"),
    ("show",),
    ("verdict",),
    ("verdict", "--json"),
    ("tail", "--idle", "0.5", "--timeout", "5"),
)


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    """``alpha observe ARGS`` as a real process (so a hang shows as a timeout)."""
    return alpha("observe", *args, timeout=timeout)


class TestNulls:
    """A null in a column that may not hold one is stream-schema, never a traceback."""

    @pytest.mark.parametrize("name", NULLS)
    def test_verify_names_the_column(self, name: str) -> None:
        """verify refuses it as stream-schema, naming the column."""
        exc = verify_refused(ASSETS / name)
        column = name[len("null-") : -len(".aos")].replace("-", "_")
        assert ("stream-schema", True) == (exc.name, f"null {column} " in exc.detail)

    @pytest.mark.parametrize("name", NULLS)
    def test_read_stream_keeps_the_batch_before(self, name: str) -> None:
        """read_stream keeps the first batch and reports the null as stream-schema damage."""
        contents = read_stream(ASSETS / name)
        assert ([0, 1, 2, 3], "stream-schema") == (
            [e.seq for e in contents.events],
            contents.damage.name if contents.damage else None,
        )

    @pytest.mark.parametrize("command", READ_COMMANDS, ids=" ".join)
    @pytest.mark.parametrize("name", ["null-wall-ns.aos", "null-attrs.aos"])
    def test_every_read_command(self, name: str, command: tuple[str, ...]) -> None:
        """Every read command exits 1 with one `refused: stream-schema` line on stderr, no traceback."""
        proc = cli(command[0], str(ASSETS / name), *command[1:])
        assert (1, False) == (proc.returncode, b"Traceback" in proc.stderr)
        lines = [line for line in proc.stderr.splitlines() if line.startswith(b"refused: ")]
        if command[0] == "show":  # show prints its summary, with the refusal as the integrity line
            assert b"integrity  refused: stream-schema: " in proc.stdout
        else:
            assert [b"refused: stream-schema"] == [line[:22] for line in lines]


class TestMetadata:
    """Schema metadata is exactly FORMAT.md section 2."""

    @pytest.mark.parametrize(
        ("name", "says"),
        [
            ("hash-not-blake3.aos", "aos.hash is 'sha256'"),
            ("hash-missing.aos", "aos.hash is None"),
            ("metadata-extra-key.aos", "unknown schema metadata key 'aos.note'"),
            ("stream-id-uppercase.aos", "not 32 lowercase hex digits"),
            ("stream-id-short.aos", "not 32 lowercase hex digits"),
            ("stream-id-not-hex.aos", "not 32 lowercase hex digits"),
        ],
    )
    def test_refused_with_the_reason(self, name: str, says: str) -> None:
        """Each metadata defect is stream-schema and says what is wrong (all verified before this rule)."""
        exc = verify_refused(ASSETS / name)
        assert ("stream-schema", True) == (exc.name, says in exc.detail)


class TestCounts:
    """Counts in checkpoints and seals are JSON integers."""

    def test_true_is_not_one(self) -> None:
        """A seal at seq 1 counting `true` events, a checkpoint at seq 1 counting `true`: both refused."""
        assert ("stream-seal", "stream-chain") == (
            verify_refused(ASSETS / "seal-events-true.aos").name,
            verify_refused(ASSETS / "checkpoint-events-true.aos").name,
        )

    def test_float_is_not_canonical(self) -> None:
        """`"events":17.0` is not canonical attrs text at all (canonical numbers are ECMAScript's)."""
        exc = verify_refused(ASSETS / "seal-events-float.aos")
        assert ("stream-schema", 17) == (exc.name, exc.context.get("first_bad_seq"))


class TestKeys:
    """With --key: the key id is the checked key's, signatures are lowercase hex, checkpoints are signed."""

    def test_seal_naming_another_key(self) -> None:
        """A good signature under a key_id that names another key is stream-signature, naming both ids."""
        exc = verify_refused(ASSETS / "seal-names-other-key.aos", ASSETS / "signer.pub")
        ids = load_public_key(ASSETS / "forger.pub").key_id, load_public_key(ASSETS / "signer.pub").key_id
        assert ("stream-signature", True, True) == (exc.name, ids[0] in exc.detail, ids[1] in exc.detail)

    def test_cli_prints_the_checked_key(self) -> None:
        """`verify --key` prints the id of the key it checked (and --json says so too)."""
        kid = load_public_key(ASSETS / "signer.pub").key_id
        proc = cli("verify", str(ASSETS / "good-signed.aos"), "--key", str(ASSETS / "signer.pub"))
        assert (0, True) == (proc.returncode, f"signature good (key {kid})".encode() in proc.stdout)
        proc = cli("verify", str(ASSETS / "seal-names-other-key.aos"), "--key", str(ASSETS / "signer.pub"))
        assert (1, b"refused: stream-signature: ") == (proc.returncode, proc.stderr[:27])

    @pytest.mark.parametrize("key", [None, "signer.pub"])
    def test_upper_case_signature(self, key: str | None) -> None:
        """A signature in upper-case hex is stream-signature, with or without a key."""
        assert "stream-signature" == verify_refused(ASSETS / "signature-uppercase.aos", key and ASSETS / key).name

    def test_unsigned_checkpoint_under_key(self) -> None:
        """A signed seal over unsigned checkpoints is stream-signature with --key (and verifies without)."""
        exc = verify_refused(ASSETS / "checkpoints-unsigned.aos", ASSETS / "signer.pub")
        assert ("stream-signature", "checkpoint" in exc.detail) == (exc.name, True)
        assert verify_stream(ASSETS / "checkpoints-unsigned.aos").signed

    def test_signature_without_key_id(self, surgery: ModuleType, tmp_path: Path) -> None:
        """A seal with a signature but no key_id (or the reverse) is stream-signature."""
        parts = surgery.split(ASSETS / "good-signed.aos")
        rows = surgery.all_rows(parts)
        got = []
        for drop in ("key_id", "signature"):
            seal = dict(rows[-1][0])
            attrs = json.loads(seal["attrs"])
            del attrs[drop]
            seal["attrs"] = canonical_json(attrs)
            surgery.rehash([seal], rows[-2][-1]["hash"])
            p = surgery.Parts(
                parts.head, [*parts.batches[:-1], surgery.encode_batch([seal])], parts.tail, parts.stream_id
            )
            (tmp_path / "s.aos").write_bytes(p.join())
            got.append(verify_refused(tmp_path / "s.aos").name)
        assert ["stream-signature"] * 2 == got


class TestNotAFile:
    """A path that is not a regular file is stream-missing at once: never a usage error, never a hang."""

    @pytest.mark.parametrize("command", READ_COMMANDS, ids=" ".join)
    def test_directory(self, command: tuple[str, ...], tmp_path: Path) -> None:
        """A directory is stream-missing (exit 1), not a usage error (exit 2)."""
        proc = cli(command[0], str(tmp_path), *command[1:])
        assert (1, b"refused: stream-missing: ") == (proc.returncode, proc.stderr[:25])

    @pytest.mark.parametrize("command", READ_COMMANDS, ids=" ".join)
    def test_fifo(self, command: tuple[str, ...], tmp_path: Path) -> None:
        """A FIFO nobody writes to is refused at once (the old reader blocked in open() for ever)."""
        fifo = tmp_path / "stream.aos"
        os.mkfifo(fifo)
        proc = cli(command[0], str(fifo), *command[1:], timeout=30)
        assert (1, b"refused: stream-missing: ") == (proc.returncode, proc.stderr[:25])

    @pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
    def test_device(self, device: str) -> None:
        """A character device is stream-missing, not read (and /dev/zero is not read for ever)."""
        proc = cli("verify", device, timeout=30)
        assert (1, f"refused: stream-missing: {device} is a character device".encode()) == (
            proc.returncode,
            proc.stderr[: 25 + len(device) + 22],
        )

    def test_fifo_as_key(self, tmp_path: Path) -> None:
        """A FIFO given as --key is refused (stream-signature), not waited on."""
        fifo = tmp_path / "key.pub"
        os.mkfifo(fifo)
        proc = cli("verify", str(ASSETS / "good-signed.aos"), "--key", str(fifo), timeout=30)
        assert (1, b"refused: stream-signature: ") == (proc.returncode, proc.stderr[:27])


@pytest.fixture(scope="module")
def signed_sample(surgery: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, Path]:
    """A small signed, checkpointed, sealed stream (four batches) and its public key."""
    d = tmp_path_factory.mktemp("signed")
    path = d / "s.aos"
    signer = surgery.seeded_signer("aos-test-signer")
    surgery.write_sample(path, signer=signer, batch_max_events=2, events=surgery.sample_events()[:6])
    return path.read_bytes(), ASSETS / "signer.pub"


class TestDamageIsNotTruncation:
    """Only a proper prefix of a well-formed message (or of the end marker) is stream-truncated."""

    def test_no_single_flip_reads_as_a_cut(self, signed_sample: tuple[bytes, Path], tmp_path: Path) -> None:
        """No one-byte change anywhere in a signed stream is stream-truncated (each is damage or harmless)."""
        data, pub = signed_sample
        key = load_public_key(pub)
        target = tmp_path / "f.aos"
        truncated = []
        for pos in range(len(data)):
            b = bytearray(data)
            b[pos] ^= 0x80 if pos % 2 else 0x08
            target.write_bytes(b)
            try:
                verify_stream(target, key)
            except Refusal as exc:
                if exc.name == "stream-truncated":
                    truncated.append(pos)
        assert [] == truncated

    @pytest.mark.parametrize("tail", [b"\x00" * 8, b"junk1234", b"\x00" * 3, b"\xff\xff\xff\xff\x00\x00\x01\x00"])
    def test_bytes_that_start_no_message(self, surgery: ModuleType, tail: bytes, tmp_path: Path) -> None:
        """Zeros, junk, or a framing whose length no v1 message has, after the last batch: stream-chain."""
        target = tmp_path / "t.aos"
        target.write_bytes((ASSETS / "truncated-at-batch.aos").read_bytes() + tail)
        assert "stream-chain" == verify_refused(target).name

    def test_every_prefix_of_a_batch_is_a_cut(self, tmp_path: Path) -> None:
        """Every proper prefix of the next batch message (framing, metadata, body) is stream-truncated."""
        whole = (ASSETS / "unsealed.aos").read_bytes()
        cut = (ASSETS / "truncated-at-batch.aos").read_bytes()
        assert whole.startswith(cut)
        nxt = whole[len(cut) :]
        message = nxt[: 8 + struct.unpack_from("<i", nxt, 4)[0]]
        target = tmp_path / "t.aos"
        names = set()
        for n in range(1, len(message) + 64):
            target.write_bytes(cut + nxt[:n])
            names.add(verify_refused(target).name)
        assert {"stream-truncated"} == names


class TestGenesisHead:
    """The head before seq 0 is the genesis."""

    def test_empty_stream_seal_names_the_genesis(self, tmp_path: Path) -> None:
        """A stream sealed with no event: its seal (seq 0) names the genesis as head and counts 0 events."""
        from aos.writer import StreamWriter

        w = StreamWriter(tmp_path / "e.aos", background_flush=False)
        w.seal()
        v = verify_stream(tmp_path / "e.aos")
        assert (genesis(v.stream_id).hex(), 0, 1) == (v.seal["head"], v.seal["events"], v.events)


def _es_reference(x: float) -> str:
    """ECMAScript Number::toString from FORMAT.md, derived independently with exact decimals: the
    fewest significant digits k whose value reads back as ``x`` (the closest such, the even one on a
    tie), then the placement rules."""
    import decimal

    if x == 0:
        return "0"
    exact = decimal.Decimal(abs(x))
    for k in range(1, 18):
        found = []
        for rounding in (decimal.ROUND_FLOOR, decimal.ROUND_CEILING):
            with decimal.localcontext() as ctx:
                ctx.prec, ctx.rounding = k, rounding
                candidate = +exact
            if float(candidate) == abs(x):
                found.append(candidate)
        if found:
            best = min(found, key=lambda d: (abs(d - exact), int(d.as_tuple().digits[-1]) % 2))
            break
    _, digits, exponent = best.normalize().as_tuple()
    s = "".join(map(str, digits))
    k, n = len(s), len(s) + int(exponent)
    if k <= n <= 21:
        out = s + "0" * (n - k)
    elif 0 < n <= 21:
        out = s[:n] + "." + s[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * -n + s
    else:
        out = s[0] + ("." + s[1:] if k > 1 else "") + "e" + ("+" if n - 1 >= 0 else "-") + str(abs(n - 1))
    return ("-" if x < 0 else "") + out


class TestNumbers:
    """Floats in attrs are written in ECMAScript / RFC 8785 form, and only that form is canonical."""

    @pytest.mark.parametrize(
        ("value", "text"),
        [
            (1.5, "1.5"),
            (2.0, "2"),
            (-0.0, "0"),
            (1e-5, "0.00001"),
            (1e-7, "1e-7"),
            (1.5e16, "15000000000000000"),
            (1e21, "1e+21"),
            (123456789.0, "123456789"),
            (5e-324, "5e-324"),
            (0.1 + 0.2, "0.30000000000000004"),
        ],
    )
    def test_known_forms(self, value: float, text: str) -> None:
        """The ECMAScript form, where Python's repr would write 2.0, 1e-05, 1e-07 or 1.5e+16."""
        assert (text, f'{{"x":{text}}}') == (es_number(value), canonical_json({"x": value}))

    @settings(max_examples=500, deadline=None)
    @given(st.floats(allow_nan=False, allow_infinity=False))
    @example(5.960464477539063e-08)  # 2**-24: correctly rounded to 16 digits it does not read back
    def test_matches_an_independent_derivation(self, value: float) -> None:
        """es_number equals a derivation from the rules alone, reads back as the same double, and is canonical."""
        text = es_number(value)
        assert (_es_reference(value), True) == (text, float(text) == value)
        attrs = canonical_json({"x": value})
        assert attrs == canonical_json(parse_canonical(attrs))

    @pytest.mark.parametrize(
        "text", ['{"x":1.0}', '{"x":1E5}', '{"x":-0}', '{"x":1e-05}', '{"x":1.5e+16}', '{"x":0.10}']
    )
    def test_other_forms_are_not_canonical(self, text: str) -> None:
        """A number written any other way is not canonical attrs (so stream-schema in verify)."""
        with pytest.raises(ValueError, match="canonical"):
            parse_canonical(text)

    def test_nan_and_infinity(self) -> None:
        """NaN and the infinities cannot be written."""
        for bad in (math.nan, math.inf, -math.inf):
            with pytest.raises(ValueError, match="JSON"):
                canonical_json({"x": [bad]})
