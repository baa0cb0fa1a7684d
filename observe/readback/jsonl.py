"""``read --json`` a batch at a time: each line built by Arrow's compute kernels, not per event in Python.

The line of an event is ``event_json``'s, byte for byte. That line re-encodes the attrs it parsed
(``ensure_ascii=False``, no spaces), so the stored text is copied as it is only where that round trip
is the identity. A row is copied when (checked on the whole column at once):

- its attrs match :data:`ATTRS_EXACT`: a JSON object nested at most :data:`DEPTH` deep, with no
  space, no backslash, no number but an integer in its one form (no ``-0``, no fraction or exponent);
- no object in it names a key twice (parsed, a repeated key comes back once, its last value kept):
  checked once per distinct shape of the attrs (its keys and brackets, the values taken out);
- its kind and step hold no character that JSON escapes (``"``, ``\\``, controls).

Every other row (a float, an escape, a repeated key, text that is not JSON) gets ``event_json``'s
line, computed the old way; a batch in which that raises is written the old way, line by line up to
the refusal, so a damaged stream prints exactly what it printed before.

Nothing here converts a Python object to Arrow (``pa.array``, ``pa.scalar``): where pandas is
installed, pyarrow imports it for that (about 150 ms). Constant text is built from buffers. The kernels
are called by name through ``pyarrow._compute`` (``aos.reader.compute``): ``pyarrow.compute`` itself wraps every
one of Arrow's ~300 functions in a Python function with its docstring when it is imported (30-60 ms,
a fifth of ``read --json`` of 100k small events), and ``Array.cast`` and ``.filter`` import it.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Collection, Iterable
from itertools import accumulate
from typing import IO, TYPE_CHECKING, Any

from aos.event import Event
from aos.reader import compute
from aos.refusals import Refusal

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ATTRS_EXACT", "DEPTH", "FEW", "GROUP_BYTES", "GROUP_ROWS", "write_json_lines"]

#: How deep an attrs object may nest and still be copied as stored (the regex grows 4x a level,
#: and RE2 matches a fourth level several times slower).
DEPTH = 3

_STRING = r'"[^"\\\x00-\x1f]*"'
_SCALAR = _STRING + r"|0|-?[1-9][0-9]{0,99}|true|false|null"


def _value(depth: int) -> str:
    if depth == 0:
        return _SCALAR
    inner = _value(depth - 1)
    member = f"{_STRING}:(?:{inner})"
    return f"{_SCALAR}|\\[(?:(?:{inner})(?:,(?:{inner}))*)?\\]|\\{{(?:{member}(?:,{member})*)?\\}}"


def _object(depth: int) -> str:
    member = f"{_STRING}:(?:{_value(depth - 1)})"
    return f"^\\{{(?:{member}(?:,{member})*)?\\}}$"


#: The attrs texts that ``event_json`` writes back unchanged, but for a repeated key (checked apart).
ATTRS_EXACT = _object(DEPTH)

#: Consecutive batches are taken together up to this many events, or this many bytes.
GROUP_ROWS = 1 << 14
GROUP_BYTES = 16 << 20

#: A batch of fewer events than this (a log's: a few chunks of a MiB) is written event by event.
FEW = 64

#: Every token of an attrs text that matched ``ATTRS_EXACT``: a key (kept), a string, a number, a literal.
_TOKEN = r'("[^"]*":)|"[^"]*"|-?[0-9]+|true|false|null'

#: A character JSON escapes: a kind or step holding one is encoded the old way.
_ESCAPED = r'[\x00-\x1f"\\]'


def write_json_lines(
    batches: Iterable[Any],
    encode: Callable[[Event], str],
    out: IO[bytes],
    kinds: Collection[str] = (),
) -> None:
    """Write every event of ``batches`` (Arrow record batches) as ``encode``'s JSON line.

    Consecutive batches are taken together up to :data:`GROUP_ROWS` events or :data:`GROUP_BYTES`
    (RE2 compiles ``ATTRS_EXACT`` once per kernel call, milliseconds: once per group, not per batch).
    ``kinds``, when given, keeps only the events of those kinds. ``encode`` is ``event_json``: it
    writes the rows that cannot be copied, and a whole group in which it raises a refusal.
    """
    import gc

    collecting = gc.isenabled()
    gc.disable()  # every object made here is acyclic (as read.py's event-by-event writer says)
    try:
        _write_all(batches, encode, out, kinds)
    finally:
        if collecting:
            gc.enable()


def _write_all(batches: Iterable[Any], encode: Callable[[Event], str], out: IO[bytes], kinds: Collection[str]) -> None:
    wanted = _text([k.encode("utf-8") for k in sorted(kinds)]) if kinds else None
    group: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in batches:
        if wanted is not None:
            from pyarrow._compute import SetLookupOptions

            value_set = _cast(wanted, batch.schema.field(3).type)
            batch = compute("filter", batch, compute("is_in", batch.column(3), options=SetLookupOptions(value_set)))
        if batch.num_rows == 0:
            continue
        if batch.num_rows < FEW:  # a few big chunks: the kernels' fixed cost and copies are not worth it
            _write_group(group, encode, out)
            group, rows, size = [], 0, 0
            _one_by_one(batch, encode, out)
            continue
        group.append(batch)
        rows, size = rows + batch.num_rows, size + batch.nbytes
        if rows >= GROUP_ROWS or size >= GROUP_BYTES:
            _write_group(group, encode, out)
            group, rows, size = [], 0, 0
    _write_group(group, encode, out)


def _write_group(group: list[pa.RecordBatch], encode: Callable[[Event], str], out: IO[bytes]) -> None:
    """The lines of consecutive batches, in one write; event by event up to a refusal where one is raised."""
    if not group:
        return
    if len(group) == 1:
        batch = group[0]
    else:
        import pyarrow as pa

        batch = pa.Table.from_batches(group).combine_chunks().to_batches()[0]
    try:
        text = _batch_lines(batch, encode)
    except Refusal:
        _one_by_one(batch, encode, out)  # writes the lines up to the refusal, then raises it
        return
    out.write(text)


def _one_by_one(batch: pa.RecordBatch, encode: Callable[[Event], str], out: IO[bytes]) -> None:
    """The batch the old way: each event's line, those before a refusal written before it is raised."""
    from aos.reader import batch_events

    lines: list[str] = []
    try:
        for ev in batch_events(batch):
            lines.append(encode(ev))
    finally:
        if lines:
            lines.append("")
            out.write("\n".join(lines).encode("utf-8"))


def _text(values: list[bytes]) -> pa.Array:
    """UTF-8 ``values`` as an Arrow large_string array, built from buffers (no ``pa.array``: see the module)."""
    import pyarrow as pa

    offsets = array("q", accumulate(map(len, values), initial=0))
    return pa.Array.from_buffers(
        pa.large_string(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(values))]
    )


def _cast(values: Any, to: Any) -> Any:
    """``values.cast(to)`` (a safe cast), without importing ``pyarrow.compute``."""
    from pyarrow._compute import CastOptions

    return compute("cast", values, options=CastOptions.safe(to))


def _constants(*values: str) -> list[pa.Scalar]:
    """Each of ``values`` as an Arrow large_string scalar (taken from an array: no ``pa.scalar``)."""
    column = _text([v.encode("utf-8") for v in values])
    return [column[i] for i in range(len(values))]


def _batch_lines(batch: pa.RecordBatch, encode: Callable[[Event], str]) -> memoryview:
    """The JSON lines of one batch, as one buffer."""
    import pyarrow as pa
    from pyarrow._compute import JoinOptions, MatchSubstringOptions

    from aos.reader import batch_events

    n = batch.num_rows
    text = pa.large_string()
    seq, wall, kind, step, attrs, data = (batch.column(i) for i in (0, 1, 3, 4, 5, 6))
    escaped = MatchSubstringOptions(_ESCAPED)
    exact = compute("match_substring_regex", attrs, options=MatchSubstringOptions(ATTRS_EXACT))
    exact = compute("and_not", exact, compute("match_substring_regex", kind, options=escaped))
    step_escaped = compute(
        "and_kleene", compute("match_substring_regex", step, options=escaped), compute("is_valid", step)
    )
    exact = compute("and_not", exact, step_escaped)
    exact = compute("and_not", exact, _repeats_a_key(attrs, exact))
    quote, empty, null, head, kind_at, wall_at, step_at, attrs_at, end, b64_at = _constants(
        '"', "", "null", '{"seq":', ',"kind":"', '","wall_ns":', ',"step":', ',"attrs":', "}\n", ',"data_b64":"'
    )
    join = JoinOptions()  # a null anywhere makes the line null, as pyarrow.compute's default

    def joined(*parts: Any) -> Any:
        return compute("binary_join_element_wise", *parts, options=join)

    step_json = compute("coalesce", joined(quote, _cast(step, text), quote, empty), null)
    if data.null_count == 0:
        data_part = joined(b64_at, _text(_base64(data)), quote, empty)
    elif data.null_count < n:
        present = compute("is_valid", data)
        coded = joined(b64_at, _text(_base64(compute("filter", data, present))), quote, empty)
        data_part = compute("replace_with_mask", compute("if_else", present, empty, empty), present, coded)
    else:
        data_part = empty
    lines = joined(
        head, _cast(seq, text), kind_at, _cast(kind, text), wall_at, _cast(wall, text), step_at, step_json, attrs_at,
        _cast(attrs, text), data_part, end, empty,
    )  # fmt: skip
    if not compute("all", exact).as_py():
        slow = compute("invert", exact)
        rows = compute("indices_nonzero", slow).to_pylist()
        fill = [b""] * n
        for i, ev in zip(rows, batch_events(compute("filter", batch, slow)), strict=True):
            fill[i] = (encode(ev) + "\n").encode("utf-8")
        lines = compute("if_else", slow, _text(fill), lines)
    _, offsets, values = lines.buffers()
    bounds = memoryview(offsets).cast("q")
    return memoryview(values)[bounds[lines.offset] : bounds[lines.offset + n]]


def _base64(data: pa.Array) -> list[bytes]:
    """The base64 of each value of a binary column with no null."""
    from binascii import b2a_base64

    return [b2a_base64(d, newline=False) for d in data.to_pylist()]


def _repeats_a_key(attrs: pa.Array, exact: pa.Array) -> pa.Array:
    """True where an object of a row's attrs (one that matched ``ATTRS_EXACT``) may name a key twice.

    The rows are first told apart with every digit read as ``0`` (a batch of events of a few kinds has
    a few such texts); each distinct one is then reduced to its shape (``_TOKEN``: keys and brackets)
    and checked in Python. Two keys that differ only in which digits they hold count as the same key:
    such a row is encoded the old way, never copied wrongly. The digits are mapped in the column's
    bytes at once (``bytes.translate``: its offsets still hold), a fifth of a regular expression's
    replace over 100k rows."""
    from pyarrow._compute import ReplaceSubstringOptions

    none = compute("and_not", exact, exact)
    texts = compute("dictionary_encode", compute("filter", _digits_zeroed(attrs), exact))
    shapes = compute("replace_substring_regex", texts.dictionary, options=ReplaceSubstringOptions(_TOKEN, r"\1"))
    repeats = [_shape_repeats(shape) for shape in shapes.to_pylist()]
    if not any(repeats):
        return none
    return compute("replace_with_mask", none, exact, compute("take", _bools(repeats), texts.indices))


#: Every digit as ``0`` (``_digits_zeroed``).
_ZERO_DIGITS = bytes.maketrans(b"123456789", b"000000000")


def _digits_zeroed(column: pa.Array) -> pa.Array:
    """A string column with every ASCII digit replaced by ``0`` (one byte for one: the offsets still hold)."""
    import pyarrow as pa

    validity, offsets, data = column.buffers()
    zeroed = pa.py_buffer(data.to_pybytes().translate(_ZERO_DIGITS)) if data is not None else None
    return pa.Array.from_buffers(
        column.type, len(column), [validity, offsets, zeroed], null_count=column.null_count, offset=column.offset
    )


def _bools(values: list[bool]) -> pa.Array:
    import pyarrow as pa

    bits = bytearray((len(values) + 7) // 8)
    for i, v in enumerate(values):
        if v:
            bits[i >> 3] |= 1 << (i & 7)
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bytes(bits))])


def _shape_repeats(shape: str) -> bool:
    """Whether an object of ``shape`` (``{"a":,"b":{"c":}}``: keys and brackets) names a key twice."""
    stack: list[set[str] | None] = []
    i, n = 0, len(shape)
    while i < n:
        c = shape[i]
        if c == "{":
            stack.append(set())
        elif c == "[":
            stack.append(None)
        elif c in "}]":
            stack.pop()
        elif c == '"':
            end = shape.index('":', i + 1)
            key = shape[i + 1 : end]
            seen = stack[-1]
            assert seen is not None  # a key is only ever inside an object
            if key in seen:
                return True
            seen.add(key)
            i = end + 1
        i += 1
    return False
