"""Arbitrary events written with StreamWriter read back exactly (aos reader and stock pyarrow) and verify."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pyarrow.ipc as ipc
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from aos.canonical import canonical_json, encode_event
from aos.chain import genesis, link
from aos.event import Event
from aos.reader import iter_events, read_stream
from aos.verify import verify_stream
from aos.writer import StreamWriter

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_names = itertools.count()  # hypothesis reseeds `random` per example, so names come from a counter
RESERVED = {"seal", "checkpoint"}  # the writer appends these itself; verify checks their attrs

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
attrs_st = st.dictionaries(st.text(max_size=12), json_values, max_size=5)
kinds_st = st.sampled_from(["stdout", "stderr", "receipt", "artifact.chunk", "verdict", "x.custom"]) | st.text(
    min_size=1, max_size=16
).filter(lambda k: k not in RESERVED)
steps_st = st.none() | st.just("") | st.text(max_size=16)
data_st = st.none() | st.just(b"") | st.binary(max_size=512)

Spec = tuple[str, dict[str, Any], bytes | None, str | None, int | None, int | None]


@st.composite
def event_specs(draw: st.DrawFn, *, clock: bool = True) -> Spec:
    """One event to append: kind, attrs, data, step and (sometimes) explicit clocks."""
    wall = draw(st.none() | INT64) if clock else None
    mono = draw(st.none() | INT64) if clock else None
    return (draw(kinds_st), draw(attrs_st), draw(data_st), draw(steps_st), wall, mono)


small_specs = st.tuples(
    st.sampled_from(["stdout", "stderr", "receipt"]),
    st.dictionaries(st.sampled_from(["i", "name", "é"]), st.integers() | st.text(max_size=4), max_size=2),
    st.none() | st.binary(max_size=16),
    st.none() | st.sampled_from(["", "build", "ステップ"]),
    st.none(),
    st.none(),
)


def write(path: Path, specs: list[Spec], **options: Any) -> None:
    """Append ``specs`` with a writer that never adds checkpoints, then seal."""
    options.setdefault("checkpoint_interval", float("inf"))
    options.setdefault("background_flush", False)
    w = StreamWriter(path, **options)
    for kind, attrs, data, step, wall, mono in specs:
        w.append(kind, attrs, data, step, wall_ns=wall, mono_ns=mono)
    w.seal()


def expected_rows(specs: list[Spec], events: list[Event]) -> list[tuple[Any, ...]]:
    """The column values each spec must come back as (clocks taken from what was stored when not given)."""
    return [
        (
            seq,
            ev.wall_ns if wall is None else wall,
            ev.mono_ns if mono is None else mono,
            kind,
            step,
            canonical_json(attrs),
            data,
        )
        for seq, ((kind, attrs, data, step, wall, mono), ev) in enumerate(zip(specs, events, strict=False))
    ]


def same_json(written: Any, read: Any) -> bool:
    """``read`` is ``written`` back, a float possibly as the integer token that names the same double."""
    if isinstance(written, float):
        return isinstance(read, int | float) and not isinstance(read, bool) and float(read) == written
    if isinstance(written, dict):
        return (
            isinstance(read, dict)
            and written.keys() == read.keys()
            and all(same_json(written[k], read[k]) for k in written)
        )
    if isinstance(written, list | tuple):
        return (
            isinstance(read, list)
            and len(written) == len(read)
            and all(same_json(w, r) for w, r in zip(written, read, strict=True))
        )
    return type(written) is type(read) and bool(written == read)


def assert_round_trip(path: Path, specs: list[Spec]) -> None:
    """The stream at ``path`` holds exactly ``specs`` then a seal, by every reader, and verifies."""
    contents = read_stream(path)
    assert (None, len(specs) + 1) == (contents.damage, len(contents.events))
    events, seal = contents.events[:-1], contents.events[-1]
    assert "seal" == seal.kind
    want = expected_rows(specs, events)
    got = [(e.seq, e.wall_ns, e.mono_ns, e.kind, e.step, e.attrs_json, e.data) for e in events]
    assert want == got
    assert [True] * len(specs) == [same_json(a, e.attrs) for (_, a, _, _, _, _), e in zip(specs, events, strict=True)]

    table = ipc.open_stream(path.read_bytes()).read_all()
    cols = ("seq", "wall_ns", "mono_ns", "kind", "step", "attrs", "data")
    stock = [tuple(r[c] for c in cols) for r in table.to_pylist()[:-1]]
    assert want == stock
    assert [e.hash for e in contents.events] == table.column("hash").to_pylist()
    assert [e.seq for e in iter_events(path)] == list(range(len(specs) + 1))

    v = verify_stream(path)
    assert (len(specs) + 1, seal.hash.hex()) == (v.events, v.head)


class TestRoundTrip:
    """StreamWriter -> read_stream / pyarrow.ipc.open_stream / verify_stream."""

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(specs=st.lists(event_specs(), max_size=12), batch_max_events=st.integers(1, 5) | st.just(8192))
    def test_arbitrary_events(self, tmp_path: Path, specs: list[Spec], batch_max_events: int) -> None:
        """Any events (binary, empty and null data, unicode attrs and steps, any clocks) round-trip and verify."""
        path = tmp_path / f"s{next(_names)}.aos"
        write(path, specs, batch_max_events=batch_max_events)
        assert_round_trip(path, specs)

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        specs=st.lists(small_specs, min_size=40, max_size=150),
        batch_max_events=st.integers(1, 7),
        batch_max_bytes=st.integers(64, 4096),
    )
    def test_many_small_events_cross_batches(
        self, tmp_path: Path, specs: list[Spec], batch_max_events: int, batch_max_bytes: int
    ) -> None:
        """Many small events split over many small batches (by count and by size) round-trip and verify."""
        path = tmp_path / f"s{next(_names)}.aos"
        write(path, specs, batch_max_events=batch_max_events, batch_max_bytes=batch_max_bytes)
        assert_round_trip(path, specs)
        assert read_stream(path).batches > len(specs) // max(batch_max_events, 1) // 2

    @settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        sizes=st.lists(st.integers(0, 4 << 20), min_size=1, max_size=3),
        seed=st.integers(0, 2**32),
        compressible=st.booleans(),
    )
    @example(sizes=[4 << 20, 0, 1], seed=1, compressible=False)
    def test_large_chunks(self, tmp_path: Path, sizes: list[int], seed: int, compressible: bool) -> None:
        """Chunks of up to 4 MiB (random or repetitive) round-trip byte for byte and verify."""
        rng = random.Random(seed)
        chunks = [
            (b"log line %d of a test run\n" * (n // 20 + 1))[:n] if compressible else rng.randbytes(n) for n in sizes
        ]
        specs: list[Spec] = [("stdout", {"n": len(c)}, c, None, None, None) for c in chunks]
        path = tmp_path / f"s{next(_names)}.aos"
        write(path, specs, batch_max_bytes=1 << 20)
        assert_round_trip(path, specs)

    def test_null_and_empty_stay_distinct(self, tmp_path: Path) -> None:
        """Null data and empty data, null step and empty step, come back as they went in."""
        specs: list[Spec] = [
            ("stdout", {}, None, None, 1, 2),
            ("stdout", {}, b"", "", 3, 4),
            ("stdout", {"": ""}, b"\x00", "\x00", 5, 6),
        ]
        path = tmp_path / "s.aos"
        write(path, specs)
        assert_round_trip(path, specs)
        assert [(None, None), (b"", ""), (b"\x00", "\x00")] == [(e.data, e.step) for e in read_stream(path).events[:3]]

    def test_attr_key_order_is_irrelevant(self, tmp_path: Path) -> None:
        """Two attrs objects equal as JSON objects store the same text (and hash the same)."""
        a, b = tmp_path / "a.aos", tmp_path / "b.aos"
        write(a, [("receipt", {"b": 1, "a": [2, {"z": 0, "y": 1}]}, None, None, 7, 8)], stream_id="1" * 32)
        write(b, [("receipt", {"a": [2, {"y": 1, "z": 0}], "b": 1}, None, None, 7, 8)], stream_id="1" * 32)
        ea, eb = read_stream(a).events[0], read_stream(b).events[0]
        assert (ea.attrs_json, ea.hash) == (eb.attrs_json, eb.hash)

    def test_unsealed_stream_reads_with_stock_pyarrow(self, tmp_path: Path) -> None:
        """A stream closed without a seal (no end marker) is still an Arrow stream pyarrow reads."""
        path = tmp_path / "s.aos"
        w = StreamWriter(path, checkpoint_interval=float("inf"), background_flush=False, batch_max_events=2)
        for i in range(5):
            w.append("stdout", {"i": i}, b"%d" % i)
        w.close()
        assert [b"0", b"1", b"2", b"3", b"4"] == ipc.open_stream(path.read_bytes()).read_all().column(
            "data"
        ).to_pylist()


tiny_text = st.text(alphabet="a\x00\x01", max_size=3)
tiny_event = st.tuples(
    st.integers(0, 2),
    st.integers(-1, 1),
    st.integers(-1, 1),
    tiny_text,
    st.none() | tiny_text,
    tiny_text,
    st.none() | st.binary(max_size=3),
)


class TestCanonicalEncoding:
    """aos.canonical: the byte encoding the chain hashes."""

    @settings(max_examples=500)
    @given(tiny_event, tiny_event)
    def test_injective(self, a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
        """Different events (drawn from a tiny alphabet, so near-misses are common) encode differently."""
        assert (a == b) == (encode_event(*a) == encode_event(*b))

    def test_injective_exhaustive(self) -> None:
        """Every event of a small domain with shifted field boundaries has its own encoding."""
        texts = ["", "a", "aa", "\x00", "\x01"]
        domain = itertools.product(
            [0, 1], [0, -1], [0, 1], texts, [None, *texts], texts, [None, b"", b"a", b"\x00", b"\x01", b"a\x00"]
        )
        encodings: dict[bytes, tuple[Any, ...]] = {}
        for ev in domain:
            enc = encode_event(*ev)
            assert encodings.setdefault(enc, ev) == ev
        assert 2 * 2 * 2 * 5 * 6 * 5 * 6 == len(encodings)

    @settings(max_examples=200)
    @given(tiny_event, tiny_event)
    def test_link_injective(self, a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
        """Different events after the same head get different hashes."""
        prev = genesis("x")
        assert (a == b) == (link(prev, *a) == link(prev, *b))

    def test_layout(self) -> None:
        """The encoding is the documented byte layout (little-endian, length-prefixed, null markers)."""
        want = (
            (7).to_bytes(8, "little")
            + (-2).to_bytes(8, "little", signed=True)
            + (3).to_bytes(8, "little", signed=True)
            + (6).to_bytes(8, "little")
            + b"stdout"
            + b"\x00"
            + (2).to_bytes(8, "little")
            + b"{}"
            + b"\x01"
            + (3).to_bytes(8, "little")
            + b"a\x00b"
        )
        assert want == encode_event(7, -2, 3, "stdout", None, "{}", b"a\x00b")

    def test_genesis_binds_stream_id(self) -> None:
        """The chain starts from a hash of the stream id: two ids, two starting points."""
        assert genesis("a" * 32) != genesis("b" * 32)

    @given(attrs_st)
    def test_canonical_json_is_stable(self, attrs: dict[str, Any]) -> None:
        """canonical_json of its own parse is itself, with sorted keys and no whitespace between tokens."""
        text = canonical_json(attrs)
        assert text == canonical_json(json.loads(text))

    def test_canonical_json_form(self) -> None:
        """Keys sorted, no spaces, non-ASCII kept as UTF-8, big ints exact."""
        assert '{"a":[1,2],"b":"é","c":1267650600228229401496703205376}' == canonical_json(
            {"c": 2**100, "b": "é", "a": [1, 2]}
        )

    @pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
    def test_canonical_json_refuses_inexact_numbers(self, bad: float) -> None:
        """NaN and infinities have no exact JSON form and are refused with ValueError."""
        with pytest.raises(ValueError, match="JSON compliant"):
            canonical_json({"x": bad})

    @pytest.mark.parametrize("bad", [[1], "x", 1, None])
    def test_canonical_json_refuses_non_objects(self, bad: Any) -> None:
        """attrs must be a JSON object."""
        with pytest.raises(TypeError):
            canonical_json(bad)
