"""Tampering with an AOS stream is refused, by name: flipped bytes, cuts, batch surgery, forgery."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from aos.reader import EOS, StreamFile, read_stream
from aos.refusals import Refusal, StreamSchema, StreamTruncated
from aos.signing import load_public_key
from aos.verify import refusal_of, verify_stream
from tests.helpers.paths import ASSETS
from tests.helpers.refusals import verify_refused

MANIFEST: dict[str, dict[str, Any]] = json.loads((ASSETS / "MANIFEST.json").read_text())
BAD = sorted(name for name, entry in MANIFEST.items() if entry["refusal"] is not None)


def last_intact(exc: Refusal) -> str:
    """The seq a refusal names as the last intact one ("none" when there is none)."""
    m = re.search(r"last intact seq (\w+)", exc.detail)
    assert m is not None, f"the refusal does not name the last intact seq: {exc}"
    return m.group(1)


@pytest.fixture(scope="module")
def sample(
    surgery: ModuleType, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Any, list[list[dict[str, Any]]]]:
    """A small sealed stream (a few KB, four batches, the last one the seal), its parts and rows."""
    path = tmp_path_factory.mktemp("sample") / "sample.aos"
    surgery.write_sample(path, batch_max_events=2, events=surgery.sample_events()[:6])
    parts = surgery.split(path)
    return path, parts, surgery.all_rows(parts)


class TestAssets:
    """The committed known-bad streams in tests/assets."""

    @pytest.mark.parametrize("name", BAD)
    def test_refused_by_name(self, name: str, asset: Callable[[str], Path]) -> None:
        """Each known-bad asset is refused with the name its manifest states."""
        entry = MANIFEST[name]
        key = asset(entry["key"]) if "key" in entry else None
        assert entry["refusal"] == verify_refused(asset(name), key).name

    @pytest.mark.parametrize("name", sorted(n for n in BAD if "last_intact_seq" in MANIFEST[n]))
    def test_names_last_intact_seq(self, name: str, asset: Callable[[str], Path]) -> None:
        """A truncated, unsealed or reordered asset's refusal names the right last intact seq."""
        assert str(MANIFEST[name]["last_intact_seq"]) == last_intact(verify_refused(asset(name)))

    @pytest.mark.parametrize("name", sorted(n for n in BAD if "first_bad_seq" in MANIFEST[n]))
    def test_names_first_bad_seq(self, name: str, asset: Callable[[str], Path]) -> None:
        """A chain refusal names the first seq whose hash or checkpoint does not follow."""
        exc = verify_refused(asset(name))
        assert MANIFEST[name]["first_bad_seq"] == exc.context.get("first_bad_seq")
        assert f"seq {MANIFEST[name]['first_bad_seq']} " in exc.detail + " "

    @pytest.mark.parametrize("name", sorted(n for n, e in MANIFEST.items() if e["refusal"] is None))
    def test_good_assets_verify(self, name: str, asset: Callable[[str], Path]) -> None:
        """The intact assets verify (with their key where they have one)."""
        entry = MANIFEST[name]
        key = load_public_key(asset(entry["key"])) if "key" in entry else None
        v = verify_stream(asset(name), key)
        assert (18, "fail") == (v.events, (v.verdict or {}).get("verdict"))

    @pytest.mark.parametrize("name", sorted(MANIFEST))
    def test_reader_never_raises_past_the_schema(self, name: str, asset: Callable[[str], Path]) -> None:
        """``read_stream`` raises only for a bad or cut schema; any later damage is reported, not raised."""
        if MANIFEST[name].get("in_schema"):
            with pytest.raises((StreamSchema, StreamTruncated)) as info:
                read_stream(asset(name))
            assert MANIFEST[name]["refusal"] == info.value.name
            return
        contents = read_stream(asset(name))
        with StreamFile(asset(name)) as f:
            rows = sum(raw.batch.num_rows for raw in f.batches())
        assert rows == len(contents.events)

    def test_forged_seal_verifies_without_the_key(self, asset: Callable[[str], Path]) -> None:
        """Without a key the chain proves integrity against accident only: a resealed forgery verifies."""
        v = verify_stream(asset("forged-seal.aos"))
        assert load_public_key(asset("signer.pub")).key_id == v.key_id

    def test_truncated_mid_batch_keeps_complete_batches(self, asset: Callable[[str], Path]) -> None:
        """Reading a stream cut mid-batch recovers every event of the complete batches before the cut."""
        contents = read_stream(asset("truncated-mid-batch.aos"))
        assert (list(range(8)), "stream-truncated") == (
            [e.seq for e in contents.events],
            contents.damage.name if contents.damage else None,
        )


class TestFlippedBytes:
    """Flipping any one byte of a stream."""

    def test_every_byte_before_the_seal(self, sample: Any, tmp_path: Path) -> None:
        """Flipping any byte before the seal's batch (SealInfo.bytes) makes verify refuse."""
        path, parts, _ = sample
        data = path.read_bytes()
        seal_start = parts.starts[-1]
        assert verify_stream(path).seal["bytes"] == seal_start
        target = tmp_path / "flipped.aos"
        accepted = []
        for pos in range(seal_start):
            b = bytearray(data)
            b[pos] ^= 0x01
            target.write_bytes(b)
            if refusal_of(target) is None:
                accepted.append(pos)
        assert [] == accepted

    def test_end_of_stream_marker(self, sample: Any, tmp_path: Path) -> None:
        """Flipping any byte of the end-of-stream marker after the seal makes verify refuse."""
        path, _, _ = sample
        data = path.read_bytes()
        assert EOS == data[-8:]
        target = tmp_path / "flipped.aos"
        for pos in range(len(data) - 8, len(data)):
            b = bytearray(data)
            b[pos] ^= 0x80
            target.write_bytes(b)
            assert refusal_of(target) is not None, pos

    def test_seal_batch_values(self, sample: Any, surgery: ModuleType, tmp_path: Path) -> None:
        """A flip inside the seal's batch that changes any decoded value is refused."""
        path, parts, rows = sample
        data = path.read_bytes()
        target = tmp_path / "flipped.aos"
        start, message = parts.starts[-1], parts.batches[-1]
        changed = 0
        for i in range(len(message)):
            b = bytearray(data)
            b[start + i] ^= 0x01
            try:
                same = surgery.decode_batch(bytes(b[start : start + len(message)])) == rows[-1]
            except Exception:  # noqa: BLE001 - a flip that breaks decoding changes the values
                same = False
            if same:
                continue
            changed += 1
            target.write_bytes(b)
            assert refusal_of(target) is not None, i
        assert changed > 0


class TestTruncation:
    """Cutting a stream short, as a killed recorder or a full disk would."""

    def test_every_cut(self, sample: Any, tmp_path: Path) -> None:
        """A cut at a batch boundary is stream-unsealed, inside one stream-truncated; both name the last intact seq."""
        path, parts, rows = sample
        data = path.read_bytes()
        spans = enumerate(zip(parts.starts, parts.batches, strict=True))
        ends = {start + len(b): rows[i][-1]["seq"] for i, (start, b) in spans}
        boundaries = {len(parts.head): "none", **{end: str(seq) for end, seq in ends.items()}}
        seal_end = parts.starts[-1] + len(parts.batches[-1])
        target = tmp_path / "cut.aos"
        got, want = [], []
        for cut in range(len(parts.head), seal_end):
            target.write_bytes(data[:cut])
            exc = verify_refused(target)
            if cut in boundaries:
                expected = ("stream-unsealed", boundaries[cut])
            else:
                last = max((e for e in boundaries if e < cut), default=len(parts.head))
                expected = ("stream-truncated", boundaries[last])
            want.append((cut, *expected))
            got.append((cut, exc.name, last_intact(exc)))
        assert want == got

    def test_cut_inside_the_schema(self, sample: Any, tmp_path: Path) -> None:
        """A file cut inside its schema message (or empty) is stream-truncated."""
        path, parts, _ = sample
        data = path.read_bytes()
        target = tmp_path / "cut.aos"
        names = set()
        for cut in range(len(parts.head)):
            target.write_bytes(data[:cut])
            names.add(verify_refused(target).name)
        assert {"stream-truncated"} == names

    def test_cut_inside_the_end_marker(self, sample: Any, tmp_path: Path) -> None:
        """A sealed stream whose end-of-stream marker is cut short is stream-truncated."""
        path, _, _ = sample
        data = path.read_bytes()
        target = tmp_path / "cut.aos"
        names = []
        for cut in range(len(data) - 7, len(data)):
            target.write_bytes(data[:cut])
            names.append(verify_refused(target).name)
        assert ["stream-truncated"] * 7 == names

    def test_prefix_reads_back(self, sample: Any, tmp_path: Path) -> None:
        """Every prefix cut at a batch boundary reads back its batches' events, undamaged."""
        path, parts, rows = sample
        data = path.read_bytes()
        target = tmp_path / "prefix.aos"
        for n in range(len(parts.batches) + 1):
            end = parts.starts[n] if n < len(parts.batches) else len(data) - 8
            target.write_bytes(data[:end])
            contents = read_stream(target)
            assert ([r["seq"] for b in rows[:n] for r in b], None) == (
                [e.seq for e in contents.events],
                contents.damage,
            )


class TestBatchSurgery:
    """Deleting, duplicating, reordering, splicing and appending whole batches."""

    def _verify(self, parts: Any, tmp_path: Path, key: Path | None = None) -> Refusal:
        target = tmp_path / "surgery.aos"
        target.write_bytes(parts.join())
        return verify_refused(target, key)

    def test_delete(self, sample: Any, surgery: ModuleType, tmp_path: Path) -> None:
        """Deleting any batch before the seal is stream-order; deleting the seal is stream-unsealed."""
        _, parts, _ = sample
        got = []
        for i in range(len(parts.batches)):
            kept = parts.batches[:i] + parts.batches[i + 1 :]
            got.append(self._verify(surgery.Parts(parts.head, kept, parts.tail, parts.stream_id), tmp_path).name)
        assert ["stream-order"] * (len(parts.batches) - 1) + ["stream-unsealed"] == got

    def test_duplicate(self, sample: Any, surgery: ModuleType, tmp_path: Path) -> None:
        """Writing any batch twice is stream-order; a second seal batch is stream-seal."""
        _, parts, _ = sample
        got = []
        for i in range(len(parts.batches)):
            doubled = parts.batches[: i + 1] + parts.batches[i:]
            got.append(self._verify(surgery.Parts(parts.head, doubled, parts.tail, parts.stream_id), tmp_path).name)
        assert ["stream-order"] * (len(parts.batches) - 1) + ["stream-seal"] == got

    def test_reorder(self, sample: Any, surgery: ModuleType, tmp_path: Path) -> None:
        """Swapping any two neighbouring batches is stream-order, naming the last seq before the swap."""
        _, parts, rows = sample
        got, want = [], []
        for i in range(len(parts.batches) - 1):
            b = list(parts.batches)
            b[i], b[i + 1] = b[i + 1], b[i]
            exc = self._verify(surgery.Parts(parts.head, b, parts.tail, parts.stream_id), tmp_path)
            got.append((exc.name, last_intact(exc)))
            want.append(("stream-order", str(rows[i - 1][-1]["seq"]) if i else "none"))
        assert want == got

    def test_splice_from_other_stream(self, sample: Any, surgery: ModuleType, tmp_path: Path) -> None:
        """A batch of another stream with the same events and seqs is stream-chain at its first seq."""
        _, parts, rows = sample
        other_path = tmp_path / "other.aos"
        surgery.write_sample(
            other_path, stream_id=surgery.OTHER_STREAM_ID, batch_max_events=2, events=surgery.sample_events()[:6]
        )
        other = surgery.split(other_path)
        got, want = [], []
        for i in range(len(parts.batches)):
            b = list(parts.batches)
            b[i] = other.batches[i]
            exc = self._verify(surgery.Parts(parts.head, b, parts.tail, parts.stream_id), tmp_path)
            got.append((exc.name, exc.context.get("first_bad_seq")))
            want.append(("stream-chain", rows[i][0]["seq"]))
        assert want == got

    def test_batch_after_seal(self, sample: Any, surgery: ModuleType, tmp_path: Path) -> None:
        """A well-chained batch appended after the seal (before the end marker) is stream-seal."""
        _, parts, rows = sample
        seal = rows[-1][0]
        extra = {
            "seq": seal["seq"] + 1,
            "wall_ns": seal["wall_ns"],
            "mono_ns": seal["mono_ns"],
            "kind": "stdout",
            "step": None,
            "attrs": "{}",
            "data": b"late\n",
        }
        surgery.rehash([extra], seal["hash"])
        batches = [*parts.batches, surgery.encode_batch([extra], parts.stream_id)]
        assert "stream-seal" == self._verify(surgery.Parts(parts.head, batches, EOS, parts.stream_id), tmp_path).name

    def test_bytes_after_seal(self, sample: Any, surgery: ModuleType, tmp_path: Path) -> None:
        """Any bytes after the end-of-stream marker are stream-seal."""
        _, parts, _ = sample
        for tail in (b"\x00", EOS, b"x" * 100, EOS + parts.batches[0]):
            p = surgery.Parts(parts.head, parts.batches, parts.tail + tail, parts.stream_id)
            assert "stream-seal" == self._verify(p, tmp_path).name

    def test_no_end_marker(self, sample: Any, surgery: ModuleType, tmp_path: Path) -> None:
        """A sealed stream without its end-of-stream marker still verifies (the seal is complete)."""
        path, parts, _ = sample
        target = tmp_path / "noeos.aos"
        target.write_bytes(surgery.Parts(parts.head, parts.batches, b"", parts.stream_id).join())
        assert verify_stream(path).head == verify_stream(target).head

    def test_edited_values_keep_old_hash(self, sample: Any, surgery: ModuleType, tmp_path: Path) -> None:
        """Changing any one column of any event, re-encoded with its old hash kept, is stream-chain at that seq."""
        _, parts, rows = sample
        edits: dict[str, Callable[[Any], Any]] = {
            "wall_ns": lambda v: v + 1,
            "mono_ns": lambda v: v - 1,
            "kind": lambda v: v + "x",
            "step": lambda v: "s" if v is None else None,
            "attrs": lambda v: v[:-1] + ',"x":1}' if v != "{}" else '{"x":1}',
            "data": lambda v: b"" if v is None else (v + b"\x00" if v else None),
        }
        got, want = [], []
        for bi, batch in enumerate(rows[:-1]):
            for ri in range(len(batch)):
                for column, edit in edits.items():
                    edited = [dict(r) for r in batch]
                    edited[ri][column] = edit(edited[ri][column])
                    b = list(parts.batches)
                    b[bi] = surgery.encode_batch(edited, parts.stream_id)
                    exc = self._verify(surgery.Parts(parts.head, b, parts.tail, parts.stream_id), tmp_path)
                    got.append((column, exc.name, exc.context.get("first_bad_seq")))
                    want.append((column, "stream-chain", batch[ri]["seq"]))
        assert want == got

    def test_edited_verdict(self, asset: Callable[[str], Path], surgery: ModuleType, tmp_path: Path) -> None:
        """A verdict turned from fail to pass: stream-chain with the old hash, stream-seal with the chain redone."""
        parts = surgery.split(asset("good.aos"))
        rows = surgery.all_rows(parts)
        (bi, ri) = next((b, r) for b, rs in enumerate(rows) for r, e in enumerate(rs) if e["kind"] == "verdict")
        attrs = json.loads(rows[bi][ri]["attrs"])
        assert "fail" == attrs["verdict"]
        attrs["verdict"] = "pass"
        rows[bi][ri]["attrs"] = json.dumps(attrs, sort_keys=True, separators=(",", ":"))
        b = list(parts.batches)
        b[bi] = surgery.encode_batch(rows[bi])
        kept = self._verify(surgery.Parts(parts.head, b, parts.tail, parts.stream_id), tmp_path)
        prev = surgery.rehash(rows[bi], rows[bi - 1][-1]["hash"])
        for later in rows[bi + 1 :]:
            prev = surgery.rehash(later, prev)
        b = [*parts.batches[:bi], *(surgery.encode_batch(r) for r in rows[bi:])]
        redone = self._verify(surgery.Parts(parts.head, b, parts.tail, parts.stream_id), tmp_path)
        assert ("stream-chain", "stream-seal") == (kept.name, redone.name)

    def test_forged_seal(self, asset: Callable[[str], Path], surgery: ModuleType, tmp_path: Path) -> None:
        """A seal re-signed by another key (under its own or the signer's key id) is stream-signature."""
        parts = surgery.split(asset("good-signed.aos"))
        forger = surgery.seeded_signer("someone else")
        signer_id = load_public_key(asset("signer.pub")).key_id
        got = []
        for key_id in (None, signer_id):
            forged = surgery.reseal(parts, forger, key_id=key_id)
            got.append(self._verify(forged, tmp_path, asset("signer.pub")).name)
        unsigned = surgery.reseal(parts)
        got.append(self._verify(unsigned, tmp_path, asset("signer.pub")).name)
        assert ["stream-signature"] * 3 == got

    def test_reseal_is_faithful(self, asset: Callable[[str], Path], surgery: ModuleType, tmp_path: Path) -> None:
        """Resealing with the real key reproduces the signed asset byte for byte (the forgery tests test the key)."""
        parts = surgery.split(asset("good-signed.aos"))
        resealed = surgery.reseal(parts, surgery.seeded_signer("aos-test-signer"))
        assert asset("good-signed.aos").read_bytes() == resealed.join()

    def test_seal_fields(self, sample: Any, surgery: ModuleType, tmp_path: Path) -> None:
        """A seal naming the wrong head, count, byte length or file digest is stream-seal."""
        _, parts, rows = sample
        seal = rows[-1][0]
        good = json.loads(seal["attrs"])
        wrong = {"head": "00" * 32, "events": good["events"] + 1, "bytes": good["bytes"] - 1, "file_blake3": "ab" * 32}
        got = []
        for field_, value in wrong.items():
            edited = dict(seal, attrs=json.dumps({**good, field_: value}, sort_keys=True, separators=(",", ":")))
            surgery.rehash([edited], rows[-2][-1]["hash"])
            b = [*parts.batches[:-1], surgery.encode_batch([edited], parts.stream_id)]
            got.append(self._verify(surgery.Parts(parts.head, b, parts.tail, parts.stream_id), tmp_path).name)
        assert ["stream-seal"] * 4 == got


class TestStreamFile:
    """``StreamFile.batches`` (what the surgery above relies on)."""

    def test_offsets_tile_the_file(self, sample: Any) -> None:
        """Batches start at the schema's end, each where the last ended, and the end marker follows the last."""
        path, _, _ = sample
        with StreamFile(path) as f:
            spans = [(raw.start, raw.end) for raw in f.batches()]
            assert (f.schema_end, spans[-1][1], None) == (spans[0][0], f.eos_at, f.damage)
            assert [s for s, _ in spans[1:]] == [e for _, e in spans[:-1]]
            assert (f.size - 8, EOS) == (f.eos_at, f.view[f.size - 8 :].tobytes())


class TestRequireVerdict:
    """aos.verify.require_verdict: what `alpha observe verdict` reads."""

    def _stream(self, tmp_path: Path, verdicts: int) -> Path:
        from aos.writer import StreamWriter

        path = tmp_path / f"v{verdicts}.aos"
        w = StreamWriter(path, background_flush=False)
        w.append("stdout", {}, b"x")
        for i in range(verdicts):
            w.append(
                "verdict", {"gate": "exit-zero", "verdict": ["pass", "fail"][i % 2], "scope": "static", "checks": []}
            )
        w.seal()
        return path

    def test_one_verdict(self, tmp_path: Path) -> None:
        """A sealed stream with one verdict gives that verdict's attrs."""
        from aos.verify import require_verdict

        assert "pass" == require_verdict(verify_stream(self._stream(tmp_path, 1)))["verdict"]

    @pytest.mark.parametrize("verdicts", [0, 2])
    def test_none_or_several_refused(self, tmp_path: Path, verdicts: int) -> None:
        """No verdict, or more than one, is stream-verdict (the stream itself verifies)."""
        from aos.verify import require_verdict

        v = verify_stream(self._stream(tmp_path, verdicts))
        with pytest.raises(Refusal) as info:
            require_verdict(v)
        assert "stream-verdict" == info.value.name
