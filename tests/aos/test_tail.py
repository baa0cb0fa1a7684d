"""``verify_tail``: a sealed stream's last batches checked from a chain head, without reading the rest.

Checked against the test vectors (what ``verify_stream`` finds for the whole
file), and against each forgery of the tail that it must refuse.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from aos.reader import StreamFile
from aos.refusals import Refusal
from aos.signing import generate_keypair, load_public_key
from aos.verify import verify_stream, verify_tail
from tests.helpers.paths import SAMPLES
from tests.helpers.refusals import refused
from tracker.testing import flip_byte

VECTORS = SAMPLES / "vectors"
KEY = load_public_key(VECTORS / "test-key.pub")


def last_batches(path: Path) -> list[tuple[int, str]]:
    """``(start, head before its first event)`` of each batch of a stream."""
    from aos.chain import genesis

    out = []
    with StreamFile(path) as f:
        before = genesis(f.stream_id)
        for raw in f.batches():
            out.append((raw.start, before.hex()))
            before = raw.batch.column(7)[raw.batch.num_rows - 1].as_py()
    return out


@pytest.mark.parametrize("name", ["sealed.aos", "signed.aos"])
def test_any_tail_states_what_the_whole_stream_seals(name: str) -> None:
    """From any batch, the tail names the seal, head and count the full verification names."""
    v = verify_stream(VECTORS / name)
    batches = last_batches(VECTORS / name)
    assert len(batches) > 1
    for start, before in batches:
        t = verify_tail(VECTORS / name, start, before, KEY if name == "signed.aos" else None)
        assert (v.stream_id, v.head, v.events, v.seal, v.signed) == (t.stream_id, t.head, t.events, t.seal, t.signed)
        assert v.seal["bytes"] == t.seal_at
    first, _ = batches[0]
    full = verify_tail(VECTORS / name, first, batches[0][1])
    assert [v.verdict] == [e.attrs for e in full.verdicts]


def test_a_wrong_head_before_the_tail() -> None:
    start, before = last_batches(VECTORS / "sealed.aos")[-2]
    other = ("0" if before[0] != "0" else "1") + before[1:]
    assert "stream-chain" == refused(verify_tail, VECTORS / "sealed.aos", start, other).name
    assert "stream-chain" == refused(verify_tail, VECTORS / "sealed.aos", start, "not hex").name


def test_an_offset_that_begins_no_batch() -> None:
    start, before = last_batches(VECTORS / "sealed.aos")[-2]
    for at in (start + 8, 3, 10**9):
        assert "stream-chain" == refused(verify_tail, VECTORS / "sealed.aos", at, before).name


def test_signed_by_another_key_or_not_signed(tmp_path: Path) -> None:
    _, pub = generate_keypair(tmp_path / "other")
    start, before = last_batches(VECTORS / "signed.aos")[-1]
    assert "stream-signature" == refused(verify_tail, VECTORS / "signed.aos", start, before, load_public_key(pub)).name
    start, before = last_batches(VECTORS / "sealed.aos")[-1]
    assert "stream-signature" == refused(verify_tail, VECTORS / "sealed.aos", start, before, KEY).name


def test_a_changed_tail_byte_and_bytes_after_the_seal(tmp_path: Path) -> None:
    path = tmp_path / "s.aos"
    shutil.copyfile(VECTORS / "signed.aos", path)
    start, before = last_batches(path)[-2]
    flip_byte(path, start + 200)
    got = refused(verify_tail, path, start, before, KEY)
    assert isinstance(got, Refusal)
    assert got.name.startswith("stream-")
    shutil.copyfile(VECTORS / "signed.aos", path)
    with path.open("ab") as f:
        f.write(b"\0")
    assert "stream-seal" == refused(verify_tail, path, start, before).name
