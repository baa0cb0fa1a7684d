"""Start-up: what ``record -- true``, ``receipt`` and ``step`` import, and the click-free path that
``receipt`` and ``step`` take (issue 16). Imports are checked, never times."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from aos.reader import read_stream
from aos.refusals import StreamWrite
from observe.channel import client
from observe.cli import entry
from observe.devices.observers import NoObserver
from observe.recorder import record as recorder
from observe.recorder import sampler
from tests.helpers.cli import invoke
from tests.helpers.run import child_env

#: Modules the plain ``record -- true`` path has no use for (each costs milliseconds to tens of them).
HEAVY = ("cryptography", "jsonschema", "referencing", "psutil", "pynvml", "structlog", "re2", "jinja2", "ansi2html")
HEAVY += ("duckdb", "boto3", "psycopg", "gates", "numpy")

PROBE = """
import json, sys
sys.argv = ['alpha', *json.loads(sys.argv[1])]
from observe.cli.entry import main
try:
    main()
except SystemExit:
    pass
full = len(sys.argv) > 2
print(json.dumps(sorted({m if full else m.split('.')[0] for m, mod in sys.modules.items() if mod is not None})))
"""


def loaded(args: list[str], cwd: Path, env: dict[str, str] | None = None, *, full: bool = False) -> set[str]:
    """The top-level modules (every module with ``full``) loaded by the time ``alpha ARGS`` is done (run in a
    fresh interpreter)."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args), *(["full"] if full else [])],
        capture_output=True,
        cwd=cwd,
        env=env,
        check=False,
        timeout=120,
    )
    lines = proc.stdout.decode().strip().splitlines()
    assert lines, proc.stderr
    return set(json.loads(lines[-1]))


def test_record_true_imports_only_what_it_uses(tmp_path: Path) -> None:
    """`record -- true` with no --sign-key, no gate: no pyarrow (the writer encodes without it, issue 39), no
    cryptography (it used to load it), no jsonschema, psutil, pynvml, structlog, gates..., and outside a
    repository no hashlib; with --sign-key, cryptography is loaded (the probe sees imports)."""
    mods = loaded(["observe", "record", "--quiet", "--out", str(tmp_path / "a.aos"), "--", "true"], tmp_path)
    assert (tmp_path / "a.aos").exists()
    assert [] == sorted(m for m in (*HEAVY, "pyarrow") if m in mods)
    assert "zstandard" in mods  # the writer's: the probe does see what was imported
    # outside a repository nothing is hashed before the command starts: no OpenSSL (hashlib, hmac)
    assert [] == sorted(m for m in ("hashlib", "hmac", "secrets") if m in mods)
    subprocess.run(
        [sys.executable, "-c", "import sys; from observe.cli.root import main; main()", "observe", "keygen", "k"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    signed = ["observe", "record", "--quiet", "--sign-key", "k.key", "--out", str(tmp_path / "b.aos"), "--", "true"]
    assert "cryptography" in loaded(signed, tmp_path)


def test_record_loads_only_its_own_command_module(tmp_path: Path) -> None:
    """`record -- true` imports observe.cli.record of the command modules, none of the others (the tree is a
    LazyGroup); `observe --help` lists every command, so it does load them all (the probe sees them)."""
    mods = loaded(["observe", "record", "--quiet", "--out", str(tmp_path / "a.aos"), "--", "true"], tmp_path, full=True)
    assert (tmp_path / "a.aos").exists()
    cli = sorted(m for m in mods if m.startswith("observe.cli."))
    assert cli == ["observe.cli.entry", "observe.cli.options", "observe.cli.record", "observe.cli.root"]
    listed = loaded(["observe", "--help"], tmp_path, full=True)
    assert {"observe.cli.gate", "observe.cli.query", "observe.cli.tracker"} <= listed


def test_the_lazy_tree_is_the_whole_tree() -> None:
    """root.LAZY names every command each module defines, under its own name, and nothing else."""
    from observe.cli import root

    assert set(root.main.commands) == {"observe", *root.LAZY["alpha"]}
    assert set(root.observe_group.commands) == set(root.LAZY["observe"])
    for group in (root.main, root.observe_group):
        for name, command in group.commands.items():
            assert command.name == name


def test_a_lazy_name_its_module_lacks_is_an_error() -> None:
    """A registry entry whose module holds no command of that name fails when it is asked for, not silently."""
    import click

    from observe.cli.root import LazyGroup

    group = LazyGroup("g")
    group.add_lazy({"nosuch": "observe.cli.report:COMMANDS"})
    with pytest.raises(LookupError, match="nosuch"):
        group.get_command(click.Context(group), "nosuch")
    assert "report" in group.list_commands(click.Context(group))  # what the module does hold was added


@pytest.mark.parametrize(
    "args", [["observe", "receipt", "x", "--field", "a=1"], ["observe", "step", "s", "--", "true"]]
)
def test_receipt_and_step_load_neither_click_nor_the_format(tmp_path: Path, args: list[str]) -> None:
    """A plain receipt or step imports no click, no pyarrow, no dataclasses (aos.event), no uuid, no hashlib
    (OpenSSL's, the recorder's side of the channel): the standard library, observe.channel.client and aos.text only."""
    receipts = tmp_path / "receipts"
    receipts.write_bytes(b"")
    env = child_env({"AOS_RECEIPTS": str(receipts), "AOS_CONTROL": str(tmp_path / "none")})
    mods = loaded(args, tmp_path, env)
    assert "observe" in mods
    absent = ("click", "pyarrow", "dataclasses", "uuid", "platform", "hashlib", *HEAVY)
    assert [] == sorted(m for m in absent if m in mods)


def test_the_shim_takes_the_fast_entry(tmp_path: Path) -> None:
    """The recorder's own ``alpha`` ($AOS_ALPHA) starts through observe.cli.entry, as the installed script does."""
    from observe.recorder.shim import alpha_shim

    shim = Path(alpha_shim(str(tmp_path)))
    assert b"from observe.cli.entry import main" in shim.read_bytes()


RECEIPTS = [
    ["x"],
    ["x", "--status", "pass"],
    ["x", "--field", "a=1", "--field", "b=x=y", "--status", "fail", "--status", "skip"],
    ["x", "--json", '{"a": 1, "b": 2}', "--field", "a=3"],
    ["", "--field", "k="],
    ["x", "--field", "a"],
    ["x", "--field", "=1"],
    ["x", "--status", "PASS"],
    ["x", "--status=pass"],
    ["x", "--field", "-a=1"],
    ["x", "--json", "[1]"],
    ["x", "y"],
    ["x", "--", "y"],
    ["--status", "pass", "x"],
    ["x", "--help"],
    ["x", "--field"],
]
STEPS = [
    ["s", "true"],
    ["s", "--", "true"],
    ["s", "--", "sh", "-c", "exit 3", "--", "x"],
    ["s", "--standalone", "--", "true", "--standalone"],
    ["s", "--standalone", "--standalone", "make", "-k"],
    ["s", "make", "--", "-k"],
    ["s", "--", "--standalone", "true"],
    ["s", "--", "-x"],
    ["s", "--"],
    ["s"],
    ["--standalone", "s", "true"],
    ["s", "--help"],
]


def clicks(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> tuple[Any, ...] | int:
    """What click passes on to observe.channel.client for ``alpha observe ARGS`` (or its exit code, when none)."""
    seen: list[tuple[Any, ...]] = []
    monkeypatch.setattr(client, "receipt", lambda name, status, fields: seen.append((name, status, fields)) or 0)
    monkeypatch.setattr(client, "step", lambda name, argv, standalone: seen.append((name, standalone, argv)) or 0)
    result = invoke("observe", *args)
    return seen[0] if seen else result.exit_code


@pytest.mark.parametrize("args", RECEIPTS, ids=repr)
def test_fast_receipt_parses_as_click_does(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> None:
    """Every receipt the fast path takes, it takes exactly as click does; the rest goes to click."""
    fast = entry.parse_receipt(args)
    if fast is None:
        return
    name, status, fields, json_obj = fast
    try:
        merged = client.build_fields(fields, json_obj)
    except ValueError:  # the fast path hands this one to click, whose usage error it is
        assert 2 == clicks(monkeypatch, ["receipt", *args])
        return
    assert clicks(monkeypatch, ["receipt", *args]) == (name, status, merged)


@pytest.mark.parametrize("args", STEPS, ids=repr)
def test_fast_step_parses_as_click_does(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> None:
    """Every step the fast path takes, it takes exactly as click does (name, --standalone, the command)."""
    fast = entry.parse_step(args)
    if fast is None:
        return
    assert clicks(monkeypatch, ["step", *args]) == fast


def test_fast_path_takes_the_plain_forms() -> None:
    """The forms a lane uses take the fast path; anything unusual goes to click."""
    assert entry.parse_receipt(["x", "--status", "pass", "--field", "n=3"]) == ("x", "pass", [("n", "3")], None)
    assert entry.parse_step(["s", "--", "make", "-k"]) == ("s", False, ["make", "-k"])
    for args in (["x", "--help"], ["x", "--status=pass"], ["x", "--field", "-a=1"], ["--status", "pass", "x"]):
        assert entry.parse_receipt(args) is None
    for args in (["s", "--help"], ["s", "--", "--standalone", "x"], ["s"], ["-s", "x"]):
        assert entry.parse_step(args) is None


def test_bad_json_still_a_usage_error(tmp_path: Path) -> None:
    """A --json the fast path cannot take goes to click: the usual usage error (2), nothing written."""
    receipts = tmp_path / "receipts"
    receipts.write_bytes(b"")
    env = child_env({"AOS_RECEIPTS": str(receipts), "AOS_CONTROL": str(tmp_path / "none")})
    code = "import sys; sys.argv = ['alpha', 'observe', 'receipt', 'x', '--json', '[1]']; "
    code += "from observe.cli.entry import main; main()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, check=False, timeout=60)
    assert 2 == proc.returncode, proc.stderr
    assert b"must be a JSON object" in proc.stderr
    assert b"" == receipts.read_bytes()


class TrackedObserver(NoObserver):
    """An observer that says on which thread it was opened and whether it was closed."""

    def __init__(self, log: list[str]) -> None:
        super().__init__("tracked")
        self.log = log

    def close(self) -> None:
        self.log.append("closed")


def tracked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    log: list[str] = []

    def opening(mode: str, env: Any) -> TrackedObserver:
        log.append(f"opened on {threading.current_thread().name}")
        return TrackedObserver(log)

    monkeypatch.setattr(sampler, "open_observer", opening)
    return log


def test_devices_open_while_the_recorder_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The device observer opens on a thread of its own from the recording's first moment (NVML's ~0.1 s
    overlaps pyarrow, the writer, the channel), and the start observation still precedes process.start."""
    log = tracked(monkeypatch)
    out = tmp_path / "a.aos"
    result = recorder.record(["true"], recorder.RecordOptions(out=out, quiet=True))
    assert 0 == result.exit_code
    assert ["opened on aos-nvml-open", "closed"] == log
    kinds = [ev.kind for ev in read_stream(out).events]
    assert kinds.index("device.observed") < kinds.index("process.start")


def test_devices_closed_when_the_recording_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An --out that exists is refused before anything runs; the observer already opening is closed."""
    log = tracked(monkeypatch)
    out = tmp_path / "a.aos"
    out.write_bytes(b"")
    with pytest.raises(StreamWrite):
        recorder.record(["true"], recorder.RecordOptions(out=out, quiet=True))
    assert ["opened on aos-nvml-open", "closed"] == log


def test_no_observer_opened_with_devices_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--observe-devices off opens nothing."""
    log = tracked(monkeypatch)
    recorder.record(["true"], recorder.RecordOptions(out=tmp_path / "a.aos", quiet=True, observe_devices="off"))
    assert [] == log


def test_read_json_loads_no_pandas(tmp_path: Path) -> None:
    """`read --json` builds its lines with Arrow's kernels and never hands pyarrow a Python object to
    convert, which (numpy present) makes pyarrow import pandas (about 150 ms); the probe does see it."""
    from aos.writer import StreamWriter

    w = StreamWriter(tmp_path / "s.aos")
    for i in range(100):  # a batch of many events: its lines are built by the kernels (observe.readback.jsonl.FEW)
        w.append("receipt", {"name": "t", "status": "pass", "fields": {"i": i}}, None, "s1")
    w.append("stdout", {}, b"hi\n")
    w.seal()
    mods = loaded(["observe", "read", "--json", str(tmp_path / "s.aos")], tmp_path, full=True)
    assert "pyarrow" in mods
    assert "pandas" not in mods
    # nor numpy (a third of pyarrow's import), nor pyarrow.compute (its ~300 wrappers): the kernels are called
    # by name through pyarrow._compute (issue 39)
    assert [] == sorted(m for m in ("numpy", "pyarrow.compute") if m in mods)
    assert "pyarrow._compute" in mods
    if importlib.util.find_spec("pandas") is None:
        return
    probe = "import pyarrow as pa; pa.scalar(1)"  # what it avoids: a conversion imports pandas
    proc = subprocess.run(
        [sys.executable, "-c", f"{probe}; import sys; print('pandas' in sys.modules)"], capture_output=True, check=True
    )
    assert proc.stdout.strip() == b"True"


def test_the_shims_receipt_and_step_skip_site(tmp_path: Path) -> None:
    """The shim starts `observe receipt` and `observe step` with -I -S (no site scan, no .pth: no editable
    finder), the tool's packages still importable from the path it gives; every other command with -I only."""
    import shlex

    from observe.recorder.shim import alpha_shim

    lines = Path(alpha_shim(str(tmp_path))).read_text().splitlines()
    assert lines[1].startswith('case "$1 $2" in "observe receipt" | "observe step") exec ')
    fast = shlex.split(lines[1].split(") exec ", 1)[1].rsplit(";;", 1)[0])
    slow = shlex.split(lines[2].removeprefix("exec "))
    assert fast[1:4] == ["-I", "-S", "-c"]
    assert slow[1:3] == ["-I", "-c"]
    tail = "from observe.cli.entry import main; main()"
    probe = (
        "import observe.cli.entry, aos.text; print(sorted(m for m in sys.modules if m == 'site' or 'editable' in m))"
    )
    for argv, loaded_site in ((fast, False), (slow, True)):
        at = argv.index("-c") + 1
        assert argv[at].endswith(tail)
        code = argv[at].removesuffix(tail) + probe
        out = subprocess.run([*argv[:at], code], capture_output=True, check=True, cwd=tmp_path).stdout
        assert ("site" in out.decode()) is loaded_site, out
        if not loaded_site:
            assert out.strip() == b"[]"


def test_tracker_site_loads_no_numpy(tmp_path: Path) -> None:
    """`tracker site` reads its streams (GPUs observed, artifacts) with pyarrow but without numpy (a third of
    pyarrow's import, most of an added run's build past its pages at 10,000 runs: issue 36); the pages show
    what the stream holds."""
    from gates.testing import device_lane
    from tracker import records
    from tracker.attach import attach
    from tracker.db import init

    db, stream = str(tmp_path / "t.sqlite3"), tmp_path / "lane.aos"
    conn = init(db)
    try:
        run = records.start_run(conn, lane="distributed-device")
        lane = device_lane()
        lane.add("artifact", {"path": "out/report.txt", "size": 3, "blake3": "0" * 64})
        lane.add("verdict", lane.evaluate().to_attrs())
        lane.write(stream)
        attach(conn, stream, run)
    finally:
        conn.close()
    mods = loaded(["tracker", "--db", db, "site", str(tmp_path / "site")], tmp_path, full=True)
    assert "pyarrow" in mods  # the probe does see it
    assert "numpy" not in mods
    (page,) = (tmp_path / "site" / "runs").iterdir()
    text = page.read_text(encoding="utf-8")
    assert ("GPU-0000-alpha" in text, "out/report.txt" in text) == (True, True)
