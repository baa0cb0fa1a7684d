"""Random and mutated bytes fed to the reader, the verifier and `alpha observe verify`: only refusals escape."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aos.canonical import canonical_json
from aos.reader import EOS, iter_events, read_stream
from aos.refusals import Refusal
from aos.verify import verify_stream
from tests.helpers.cli import invoke
from tests.helpers.paths import ASSETS

BASES = {name: (ASSETS / name).read_bytes() for name in ("good.aos", "good-signed.aos", "truncated-at-batch.aos")}
SCHEMA_END = 704  # every base stream's schema message is this long (checked below)
_names = itertools.count()  # hypothesis reseeds `random` per example, so file names come from a counter
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def exercise(path: Path) -> str | None:
    """Read and verify ``path`` every way the library offers; return the refusal name (None if it verifies).

    Anything other than a ``Refusal`` escaping fails the test.
    """
    with contextlib.suppress(Refusal):
        for ev in read_stream(path).events:
            _ = (ev.seq, ev.kind, ev.data, ev.hash)
            with contextlib.suppress(Refusal):
                _ = ev.attrs
    with contextlib.suppress(Refusal):
        for _ in iter_events(path):
            pass
    refusal: Refusal | None = None
    try:
        verify_stream(path)
    except Refusal as exc:
        refusal = exc
    if refusal is None:
        return None
    assert f"refused: {refusal.name}: " == refusal.diagnostics()[: len(refusal.name) + 11]
    assert refusal.name.startswith("stream-")
    return refusal.name


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid base stream with a few random flips, inserts, deletes, overwrites and a possible truncation."""
    data = bytearray(BASES[draw(st.sampled_from(sorted(BASES)))])
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "overwrite", "frame", "truncate", "dup"]))
        # positions from a seeded Random: hypothesis draws small integers far more often than others
        pos = random.Random(draw(st.integers(0, 2**64))).randrange(max(len(data), 1))
        if op == "flip":
            if data:
                data[pos] ^= draw(st.integers(1, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 64))]
        elif op == "overwrite":
            chunk = draw(st.binary(min_size=1, max_size=16))
            data[pos : pos + len(chunk)] = chunk
        elif op == "frame":
            # framing words: continuation marker, lengths (huge, negative, zero), end-of-stream
            word = draw(
                st.sampled_from([b"\xff\xff\xff\xff", b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80", b"\x00" * 4, EOS])
            )
            data[pos : pos + len(word)] = word
        elif op == "truncate":
            del data[pos:]
        else:
            n = draw(st.integers(1, 512))
            data[pos:pos] = data[pos : pos + n]
    return bytes(data)


class TestFuzzLibrary:
    """read_stream, iter_events and verify_stream on hostile bytes."""

    def test_bases(self) -> None:
        """The fuzz bases are what the mutations assume: sealed, signed, and unsealed streams."""
        assert [None, None, "stream-unsealed"] == [
            exercise(ASSETS / n) for n in ("good.aos", "good-signed.aos", "truncated-at-batch.aos")
        ]
        assert {b"\xff\xff\xff\xff"} == {data[:4] for data in BASES.values()}

    @FUZZ
    @given(st.binary(max_size=2048))
    def test_random_bytes(self, tmp_path: Path, data: bytes) -> None:
        """Random bytes are refused (or, if empty-looking, still refused), never a traceback."""
        path = tmp_path / f"r{next(_names)}.aos"
        path.write_bytes(data)
        assert exercise(path) is not None

    @FUZZ
    @given(st.binary(max_size=4096))
    def test_random_bytes_after_schema(self, tmp_path: Path, data: bytes) -> None:
        """A valid AOS schema followed by random bytes is refused, never a traceback."""
        path = tmp_path / f"s{next(_names)}.aos"
        path.write_bytes(BASES["good.aos"][:SCHEMA_END] + data)
        assert exercise(path) is not None

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(mutated())
    def test_mutated_streams(self, tmp_path: Path, data: bytes) -> None:
        """Valid streams with random mutations yield only refusals (and a mutation that changes bytes is caught)."""
        path = tmp_path / f"m{next(_names)}.aos"
        path.write_bytes(data)
        name = exercise(path)
        changed = data not in BASES.values() and not any(data == b[:-8] for b in BASES.values())
        if changed and name is None:
            # the only undetectable changes to a sealed stream: dropping its end-of-stream marker,
            # or touching the seal's own batch where no value changes
            seal_start = verify_stream(path).seal["bytes"]
            assert any(data[:seal_start] == b[:seal_start] for b in BASES.values())


class TestMalformedAttrs:
    """Correctly chained events whose attrs text is not a canonical JSON object (a foreign or forged writer)."""

    @staticmethod
    def _forge(surgery: ModuleType, asset: Callable[[str], Path], tmp_path: Path, kind: str, attrs: str) -> Path:
        """The good asset with its verdict (or seq 1) made ``kind`` with ``attrs``, rechained and resealed."""
        parts = surgery.split(asset("good.aos"))
        rows = surgery.all_rows(parts)
        target: dict[str, Any] = rows[-2][0] if kind == "verdict" else rows[0][1]
        target["kind"], target["attrs"] = kind, attrs
        forged = surgery.reseal(
            surgery.Parts(parts.head, [surgery.encode_batch(r) for r in rows], parts.tail, parts.stream_id)
        )
        path = tmp_path / f"{kind}.aos"
        path.write_bytes(forged.join())
        return path

    @pytest.mark.parametrize("kind", ["stdout", "checkpoint", "verdict"])
    @pytest.mark.parametrize("attrs", ["not json {", "[1,2]", '"pass"', "{}{}", '{"a": 1}', '{"b":1,"a":2}'])
    def test_not_a_canonical_object_is_refused(
        self, surgery: ModuleType, asset: Callable[[str], Path], tmp_path: Path, kind: str, attrs: str
    ) -> None:
        """An event whose attrs text is not the canonical JSON of an object is stream-schema, naming its seq."""
        path = self._forge(surgery, asset, tmp_path, kind, attrs)
        with pytest.raises(Refusal) as info:
            verify_stream(path)
        seq = 16 if kind == "verdict" else 1
        assert ("stream-schema", seq) == (info.value.name, info.value.context.get("first_bad_seq"))
        assert None is exercise(path) or "stream-schema" == exercise(path)

    @pytest.mark.parametrize("attrs", ['{"verdict":"pass","verdict":"fail"}', '{"x":NaN}', '{"x":1e999}'])
    def test_verdict_with_inexact_values_is_refused(
        self, surgery: ModuleType, asset: Callable[[str], Path], tmp_path: Path, attrs: str
    ) -> None:
        """A verdict with repeated keys or a number JSON cannot state exactly is stream-schema."""
        path = self._forge(surgery, asset, tmp_path, "verdict", attrs)
        assert "stream-schema" == exercise(path)

    def test_event_attrs_refuses(self, surgery: ModuleType, asset: Callable[[str], Path], tmp_path: Path) -> None:
        """Event.attrs on an event read back with non-JSON attrs raises stream-schema, not a JSON error."""
        path = self._forge(surgery, asset, tmp_path, "stdout", "not json {")
        ev = read_stream(path).events[1]
        with pytest.raises(Refusal) as info:
            _ = ev.attrs
        assert "stream-schema" == info.value.name

    def test_schema_field_name_not_utf8(self, asset: Callable[[str], Path], tmp_path: Path) -> None:
        """A schema whose field name is not valid UTF-8 is stream-schema, not a UnicodeDecodeError."""
        data = asset("good.aos").read_bytes()
        assert 1 == data.count(b"mono_ns")
        path = tmp_path / "bad-name.aos"
        path.write_bytes(data.replace(b"mono_ns", b"mono\x80ns"))
        assert "stream-schema" == exercise(path)


class TestFuzzCli:
    """`alpha observe verify` on hostile files: exit 1 and one `refused: ` line, never a traceback."""

    _exception: BaseException | None = None

    def _cli_verify(self, path: Path) -> tuple[int, str, str]:

        result = invoke("observe", "verify", str(path), catch_exceptions=True)
        self._exception = result.exception if not isinstance(result.exception, SystemExit) else None
        return result.exit_code, result.stdout, result.stderr

    @pytest.mark.parametrize("name", sorted(p.name for p in ASSETS.glob("*.aos")))
    def test_assets(self, name: str) -> None:
        """Every asset gives exit 0 with `ok:` or exit 1 with stderr `refused: NAME: ...`."""
        code, out, err = self._cli_verify(ASSETS / name)
        if code == 0:
            assert ("ok: ", "") == (out[:4], err)
        else:
            assert (1, "refused: stream-", 1) == (code, err[:16], err.count("\n"))

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(mutated())
    def test_mutated(self, tmp_path: Path, data: bytes) -> None:
        """Mutated streams through the CLI: exit 0 or 1, and a refusal is one `refused: ` line on stderr."""
        path = tmp_path / f"c{next(_names)}.aos"
        path.write_bytes(data)
        code, out, err = self._cli_verify(path)
        assert (code in (0, 1), None) == (True, self._exception)
        if code == 1:
            assert ("refused: stream-", "") == (err[:16], out)
            assert "Traceback" not in err

    def test_missing_file(self, tmp_path: Path) -> None:
        """A missing stream is exit 1, stream-missing."""
        code, _, err = self._cli_verify(tmp_path / "nope.aos")
        assert (1, "refused: stream-missing: ") == (code, err[:25])

    def test_real_process(self) -> None:
        """The installed `alpha` entry point (a real process) refuses a flipped byte without a traceback."""
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                "from observe.cli.root import main; main()",
                "observe",
                "verify",
                str(ASSETS / "flipped-byte.aos"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (1, "refused: stream-chain: ", "") == (proc.returncode, proc.stderr[:23], proc.stdout)


# -- every read command, and gate files (issue 11) ------------------------------------------

#: Each read command with each of its options (verify --key and verdict --key check a signature).
READ_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("verify",),
    ("verify", "--json"),
    ("verify", "--key", str(ASSETS / "signer.pub")),
    ("read",),
    ("read", "--json"),
    ("read", "--stdout"),
    ("read", "--stderr"),
    ("read", "--artifact", "out/résumé.txt"),
    ("read", "--kind", "verdict", "--kind", "stdout"),
    ("show",),
    ("show", "--key", str(ASSETS / "signer.pub")),
    ("verdict",),
    ("verdict", "--json"),
    ("verdict", "--key", str(ASSETS / "signer.pub")),
)
#: What each command may exit with: 0 (or verdict's 0/1/3) and 1 for a refusal.
EXITS = {"verify": {0, 1}, "read": {0, 1}, "show": {0, 1}, "verdict": {0, 1, 3}}
REFUSALS = (
    "stream-missing",
    "stream-schema",
    "stream-truncated",
    "stream-chain",
    "stream-order",
    "stream-unsealed",
    "stream-seal",
    "stream-signature",
    "stream-verdict",
    "artifact-missing",
)


def run_read_command(args: tuple[str, ...], path: Path) -> tuple[int, str]:
    """One read command in process: its exit code and stderr; any exception but SystemExit fails the test."""

    result = invoke("observe", args[0], str(path), *args[1:], catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{args} raised {result.exception!r}") from result.exception
    assert result.exit_code in EXITS[args[0]], (args, result.exit_code, result.stderr)
    for line in result.stderr.splitlines():
        assert line.startswith("refused: "), (args, line)
        assert line.split(":")[1].strip() in REFUSALS, (args, line)
    if result.exit_code == 1 and args[0] in ("verify", "read"):  # show summarises; verdict 1 is a fail
        assert result.stderr.startswith("refused: "), (args, result.stderr)
    return result.exit_code, result.stderr


def run_tail(path: Path) -> bool | str:
    """``tail`` (the library behind `alpha observe tail`) with a short idle limit: True at the seal, or a refusal."""
    from observe.readback.tail import follow

    with open(os.devnull, "wb") as sink:
        try:
            return follow(path, idle=0.2, timeout=10, out_fd=sink.fileno(), err_fd=sink.fileno())
        except Refusal as exc:
            refusal = exc.name
    assert refusal in REFUSALS
    return refusal


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=8,
)
STREAM = "0123456789abcdef0123456789abcdef"


class TestFuzzEveryReadCommand:
    """verify, read (each option), show, verdict and tail on hostile bytes: named refusals only, and no hang."""

    @pytest.mark.parametrize("name", sorted(p.name for p in ASSETS.glob("*.aos")))
    def test_assets(self, name: str) -> None:
        """Every asset through every read command and tail."""
        for args in READ_COMMANDS:
            run_read_command(args, ASSETS / name)
        run_tail(ASSETS / name)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(mutated())
    def test_mutated(self, tmp_path: Path, data: bytes) -> None:
        """Mutated streams through every read command and tail."""
        path = tmp_path / f"e{next(_names)}.aos"
        path.write_bytes(data)
        for args in READ_COMMANDS:
            run_read_command(args, path)
        run_tail(path)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.binary(max_size=2048))
    def test_random_bytes_after_schema(self, tmp_path: Path, data: bytes) -> None:
        """A valid schema followed by random bytes, through every read command and tail."""
        path = tmp_path / f"b{next(_names)}.aos"
        path.write_bytes(BASES["good.aos"][:SCHEMA_END] + data)
        for args in READ_COMMANDS:
            run_read_command(args, path)
        run_tail(path)

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.dictionaries(st.sampled_from(["argv", "labels", "cwd", "host", "size", "path", "name"]), JSON_VALUES))
    def test_odd_attribute_types(self, surgery: ModuleType, tmp_path: Path, odd: dict[str, Any]) -> None:
        """A forged stream (chain and seal redone) whose open, step, artifact, exit and verdict attrs are odd."""
        parts = surgery.split(ASSETS / "good.aos")
        rows = surgery.all_rows(parts)
        for batch in rows[:-1]:
            for r in batch:
                if r["kind"] in ("stream.open", "step.start", "step.end", "artifact", "process.exit", "verdict"):
                    r["attrs"] = canonical_json({**json.loads(r["attrs"]), **odd, "checks": odd.get("name")})
        forged = surgery.reseal(surgery.Parts(parts.head, [surgery.encode_batch(r) for r in rows], parts.tail, STREAM))
        path = tmp_path / f"o{next(_names)}.aos"
        path.write_bytes(forged.join())
        for args in READ_COMMANDS:
            run_read_command(args, path)
        assert True is run_tail(path)

    def test_tail_on_a_real_process(self) -> None:
        """`alpha observe tail --idle` as a real process ends on a damaged asset without a traceback."""
        for name in ("null-kind.aos", "junk-after-last-batch.aos", "not-arrow.aos", "hash-not-blake3.aos"):
            proc = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "from observe.cli.root import main; main()",
                    "observe",
                    "tail",
                    str(ASSETS / name),
                    "--idle",
                    "0.5",
                    "--timeout",
                    "20",
                ],
                capture_output=True,
                timeout=60,
            )
            assert (1, False) == (proc.returncode, b"Traceback" in proc.stderr), (name, proc.stderr)


def run_gate_file(path: Path, tmp_path: Path) -> None:
    """`gates --gate-file` and `gate --gate-file` in process: exit 0, 1, 2 or 3, never an exception."""

    for argv in (
        ["observe", "gates", "--gate-file", str(path)],
        [
            "observe",
            "gate",
            "fuzz",
            "--gate-file",
            str(path),
            "--quiet",
            "--out",
            str(tmp_path / f"g{next(_names)}.aos"),
            "--",
            "true",
        ],
    ):
        result = invoke(*argv, catch_exceptions=True)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"{argv[1]} raised {result.exception!r}") from result.exception
        assert result.exit_code in (0, 1, 2, 3), (argv[1], result.exit_code, result.output)


TOML_KEYS = st.sampled_from(
    [
        "gate",
        "name",
        "scope",
        "exit",
        "code",
        "step",
        "receipt",
        "artifact",
        "part",
        "when",
        "env",
        "label",
        "equals",
        "count",
        "status",
        "id",
        "x",
    ]
)
TOML_VALUES = st.recursive(
    st.booleans() | st.integers(-5, 5) | st.text(max_size=6) | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(TOML_KEYS, children, max_size=3),
    max_leaves=10,
)


def _toml(obj: Any) -> str:
    """A small TOML writer (inline tables and arrays only) for generated documents."""
    if isinstance(obj, bool):
        return "true" if obj else "false"
    if isinstance(obj, int | float):
        return repr(obj) if isinstance(obj, int) or obj == obj else "nan"
    if isinstance(obj, str):
        return json.dumps(obj)
    if isinstance(obj, list):
        return "[" + ", ".join(_toml(v) for v in obj) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in obj.items()) + "}"


class TestFuzzGateFiles:
    """Random, malformed and deeply nested gate files: a usage error (exit 2) or a gate, never a traceback or hang."""

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.binary(max_size=512))
    def test_random_bytes(self, tmp_path: Path, data: bytes) -> None:
        """Random bytes (often not UTF-8) as a gate file."""
        path = tmp_path / f"r{next(_names)}.toml"
        path.write_bytes(data)
        run_gate_file(path, tmp_path)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.dictionaries(TOML_KEYS, TOML_VALUES, max_size=4), st.dictionaries(TOML_KEYS, TOML_VALUES, max_size=4))
    def test_structured(self, tmp_path: Path, gate: dict[str, Any], rest: dict[str, Any]) -> None:
        """Valid TOML with the gate language's keys in random shapes."""
        doc = {"gate": {"name": "fuzz", **gate}, **{k: v for k, v in rest.items() if k != "gate"}}
        path = tmp_path / f"s{next(_names)}.toml"
        path.write_text("\n".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in doc.items()) + "\n")
        run_gate_file(path, tmp_path)

    @pytest.mark.parametrize(
        "text",
        [
            "a = " + "[" * 5000 + "]" * 5000,
            "[gate]\nname = 'fuzz'\nx = " + "{a = " * 3000 + "1" + "}" * 3000,
            "[gate]\nname = 'fuzz'\n" + "".join(f"[{'.'.join(['t'] * n)}]\n" for n in range(1, 400)),
            "[gate]\nname = 'fuzz'\n[[step]]\nname = " + "'" * 3 + "x" * 100_000 + "'" * 3,
        ],
        ids=["arrays", "inline-tables", "dotted-tables", "huge-string"],
    )
    def test_deeply_nested(self, tmp_path: Path, text: str) -> None:
        """Deep nesting and huge values are a usage error (or a gate), never a RecursionError."""
        path = tmp_path / "deep.toml"
        path.write_text(text)
        run_gate_file(path, tmp_path)

    def test_fifo(self, tmp_path: Path) -> None:
        """A FIFO as a gate file is refused at once (a real process, so a hang is a timeout)."""
        fifo = tmp_path / "gate.toml"
        os.mkfifo(fifo)
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                "from observe.cli.root import main; main()",
                "observe",
                "gates",
                "--gate-file",
                str(fifo),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (2, "gate-file") == (proc.returncode, "gate-file" if "gate-file" in proc.stderr else proc.stderr)
