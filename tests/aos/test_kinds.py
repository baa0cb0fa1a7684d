"""The event kinds: aos.kinds is the one registry, docs/FORMAT.md's table equals it, no module spells a kind."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from aos import kinds
from aos.event import KINDS
from tests.helpers.paths import ROOT

PACKAGES = ("aos", "gates", "observe", "tracker")
#: The registry itself, and the modules bundled to a remote node (observe/devices/bundle.py): they run there
#: without aos.kinds, and their messages' ``type`` is the node observer's wire protocol, not a stream's kind.
ELSEWHERE = {"aos/kinds.py", "observe/devices/node_observer.py", "observe/devices/observers.py"}
#: Calls whose first argument is the kind of the event they write.
APPENDS = {"append", "append_direct", "_append", "_emit", "_add", "add", "output", "one"}
#: The constants' names, by kind.
CONSTANT = {v: k for k, v in vars(kinds).items() if k.isupper() and isinstance(v, str)}


def _is_kind_expr(node: ast.AST) -> bool:
    """``ev.kind``, ``kind``, ``k``, ``row["kind"]``: an expression holding an event's kind."""
    if isinstance(node, ast.Attribute):
        return node.attr == "kind"
    if isinstance(node, ast.Name):
        return "kind" in node.id or node.id == "k"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "kind"
    return False


def _strings(node: ast.AST) -> list[ast.Constant]:
    """The string constants of a literal, or of a tuple/list/set of them (``pa.array([...])``'s list too)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [e for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("frozenset", "set", "tuple") and node.args:
        return _strings(node.args[0])
    return []


def spelled_kinds(source: str) -> list[tuple[int, str]]:
    """Where a module spells an event kind as a string: compared with a kind, the kind of an append,
    a ``kind=`` argument, a ``"kind":`` entry, a list of kinds."""
    found: list[ast.Constant] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_kind_expr(s) for s in sides):
                found += [c for s in sides for c in _strings(s)]
            elif not any(getattr(s, "id", None) == "op" for s in sides):  # a control message's op shares names
                found += [c for s in sides for c in _strings(s) if "." in str(c.value)]
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            if name in APPENDS and node.args:
                found += _strings(node.args[0])
            found += [c for a in node.args for c in _strings(a) if "." in str(c.value)]  # _first(events, "stream.open")
            found += [c for kw in node.keywords if kw.arg == "kind" for c in _strings(kw.value)]
            if name == "array" and node.args:  # pa.array([...kinds]): a filter on the kind column
                items = _strings(node.args[0])
                if items and all(str(c.value) in KINDS for c in items):
                    found += items
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "kind" and value is not None:
                    found += _strings(value)
        elif isinstance(node, ast.For | ast.comprehension) and _is_kind_expr(node.target):
            found += _strings(node.iter)
        elif isinstance(node, ast.Assign):  # kind = "x", or kind, raw = "x", ...
            for target in node.targets:
                pairs = [(target, node.value)]
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs = list(zip(target.elts, node.value.elts, strict=False))
                found += [c for t, v in pairs if _is_kind_expr(t) for c in _strings(v)]
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):
            items = _strings(node)
            whole = items and len(items) == len(node.elts) and all(str(c.value) in KINDS for c in items)
            if whole and any(
                "." in str(c.value) for c in items
            ):  # a set of kinds: {"stdout", "stderr", "artifact.chunk"}
                found += items
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and len(node.value.elts) == 2:
            kind, attrs = node.value.elts  # return "receipt.invalid", {"reason": ...}
            if any("." in str(c.value) for c in _strings(kind)) or isinstance(attrs, ast.Dict):
                found += _strings(kind)
    return sorted({(c.lineno, str(c.value)) for c in found if str(c.value) in KINDS})


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


class TestRegistry:
    """The registry, the documents and the source agree."""

    def test_event_kinds_are_the_registry(self) -> None:
        """aos.event.KINDS is the registry's names, each constant names one kind, and no two share a name."""
        assert set(kinds.REGISTRY) == KINDS
        assert {getattr(kinds, CONSTANT[k]) for k in KINDS} == KINDS
        assert all(name == k.name for name, k in kinds.REGISTRY.items())

    def test_no_module_spells_a_kind(self) -> None:
        """Outside aos/kinds.py (and the bundled node observer), no module spells a kind as a string."""
        found = {}
        for path in _modules():
            rel = path.relative_to(ROOT).as_posix()
            if rel in ELSEWHERE:
                continue
            spelled = spelled_kinds(path.read_text(encoding="utf-8"))
            if spelled:
                found[rel] = spelled
        assert {} == found

    def test_the_scan_finds_a_spelled_kind(self) -> None:
        """Each form the scan looks for is found when planted."""
        planted = [
            'if ev.kind == "process.exit": pass',
            'x = kind in ("stdout", "stderr")',
            'sink.append("verdict", {})',
            'w.append_direct("recorder.error", {})',
            'Event(1, kind="seal")',
            'd = {"kind": "telemetry"}',
            'wanted = pa.array(["device.observed"])',
            'def f():\n    return "receipt.invalid", {}',
            'if row["kind"] != "checkpoint": pass',
            'starts = _events(ev, "process.start")',
            'for kind in ("stdout", "stderr"): pass',
            '_STREAMED = frozenset({"stdout", "stderr", "artifact.chunk"})',
            'kind, raw = "receipt.invalid", b""',
            'def f():\n    return "receipt", {"name": "x"}',
            'decoders = {k: 0 for k in ("stdout", "stderr")}',
            's.output("stderr", b"")',
            'if cited[0] == "process.exit": pass',
        ]
        for source in planted:
            assert spelled_kinds(source), source
        assert [] == spelled_kinds('msg = {"stream": "stdout"}\nif op == "step.start": pass\n')

    def test_each_writer_spells_its_kind(self) -> None:
        """Every module the registry names as a kind's writer uses that kind's constant."""
        missing = []
        for k in kinds.REGISTRY.values():
            for module in k.writers:
                tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
                used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
                used |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
                if CONSTANT[k.name] not in used:
                    missing.append(f"{module} does not spell {k.name}")
        assert [] == missing


def _format_table() -> dict[str, tuple[str, str]]:
    """docs/FORMAT.md section 4's table: each kind's attrs and data cells (a row naming two kinds gives both)."""
    text = (ROOT / "docs" / "FORMAT.md").read_text(encoding="utf-8")
    section = text[text.index("## 4. Event kinds") :]
    section = section[: section.index("\n### ")]
    rows: dict[str, tuple[str, str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| `") or len(cells) != 3:
            continue
        names = re.findall(r"`([a-z.]+)`", cells[0])
        if " of the " in cells[0]:  # a further row about kinds already listed (the rebuild's steps)
            continue
        for name in names:
            rows[name] = (cells[1], cells[2])
    return rows


class TestFormat:
    """docs/FORMAT.md's table of kinds is the registry."""

    def test_the_table_lists_the_registry(self) -> None:
        """The table's kinds are the registry's, in its order."""
        assert list(kinds.REGISTRY) == list(_format_table())

    def test_the_table_names_every_field(self) -> None:
        """Each field the registry names is in its row (or in the section the row points to), and a kind has
        data exactly when its row's data cell says what it holds."""
        doc = (ROOT / "docs" / "FORMAT.md").read_text(encoding="utf-8")
        table = _format_table()
        wrong = []
        for k in kinds.REGISTRY.values():
            attrs, data = table[k.name]
            where = doc if "section" in attrs else attrs
            where += "".join(table[n][0] for n in re.findall(r"as `([a-z.]+)`", attrs) if n in table)  # as step.start
            wrong += [f"{k.name}.{f}" for f in k.fields if f"`{f}`" not in where and f'"{f}"' not in where]
            if bool(data) != k.data:
                wrong.append(f"{k.name} data")
        assert [] == wrong


#: What a new kind needs beyond its writers, each checked against the registry: the registry, FORMAT.md's table
#: (TestFormat), the vectors' generator (tests/aos/test_vectors.py) and, for a kind a gate reads, the index.
RECIPE_FILES = {"aos/kinds.py", "docs/FORMAT.md", "samples/vectors/make_vectors.py", "gates/evidence.py"}


class TestRecipe:
    """docs/ARCHITECTURE.md's "Add an event kind" names every file a kind needs."""

    def test_the_recipe_names_each_file(self) -> None:
        """The recipe names the registry's files, and each path it names exists."""
        text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
        section = text[text.index("## Add an event kind") :]
        section = section[: section.index("\n## ", 1)]
        named = set(re.findall(r"`([\w/]+\.(?:py|md))`", section))
        assert set() == RECIPE_FILES - named
        assert [] == [p for p in named if not (ROOT / p).is_file()]

    def test_the_index_files_every_kind_it_handles_by_constant(self) -> None:
        """gates/evidence.py's handler table is keyed by registered kinds only."""
        from gates.evidence import _HANDLERS

        assert set() == set(_HANDLERS) - KINDS
