"""The walls of the house (docs/ARCHITECTURE.md): who may import whom, and no import cycles.

``aos`` (the format) imports nothing of the project; ``gates`` (a pure library over
events) imports ``aos`` only; only ``observe.cli`` imports click and ``tracker``;
``observe.channel`` stays light; ``tracker`` uses only the few ``observe`` pieces it
needs. Imports inside functions count too: a lazy import is still a dependency.
Each wall is checked against a planted violation, so a checker that sees nothing fails.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.helpers.paths import ROOT

PACKAGES = ("aos", "gates", "observe", "tracker")

#: The project packages each package may import.
ALLOWED = {
    "aos": {"aos"},
    "gates": {"aos", "gates"},
    "observe": {"aos", "gates", "observe", "tracker"},
    "tracker": {"aos", "gates", "observe", "tracker"},
}
#: Where click may be imported: the command line (the tracker's command group included).
CLICK_ROOMS = ("observe.cli",)
#: The only observe rooms that may import tracker: the composition root.
TRACKER_USERS = ("observe.cli",)
#: What the tracker may use of observe: the store, the report, the small utilities, the light
#: modules of names (refusals, environment variable names), and the light registry of CI systems
#: (the CI job a run is started in); and the offline verifier of fleet sessions (a session attached to a run).
TRACKER_USES = (
    "observe.store",
    "observe.report",
    "observe.util",
    "observe.refusals",
    "observe.env",
    "observe.ci.systems",
    "observe.session",
)
#: The light channel: what it may import beyond the standard library.
CHANNEL = "observe.channel"
CHANNEL_MAY_IMPORT = ("observe.channel", "observe.env", "observe.exits", "aos.text", "aos.attrs", "aos.kinds")

Graph = Mapping[str, set[str]]


def module_name(path: Path) -> str:
    """Return the dotted module name of a file under ROOT."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def imports_of(source: str) -> set[str]:
    """Return every top-level-qualified module a source imports, at any depth (absolute imports)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def graph() -> dict[str, set[str]]:
    """Return each project module's imports (project modules and third-party names alike)."""
    return {name: imports_of(path.read_text(encoding="utf-8")) - {name} for name, path in MODULES.items()}


def _within(name: str, rooms: tuple[str, ...]) -> bool:
    return any(name == room or name.startswith(room + ".") for room in rooms)


def _top(name: str) -> str:
    return name.split(".")[0]


def violations(g: Graph) -> list[str]:
    """Return every import in ``g`` that crosses a wall, as ``"A imports B (why)"``."""
    found: list[str] = []
    stdlib = sys.stdlib_module_names
    for name, deps in g.items():
        for dep in deps:
            top = _top(dep)
            if top in PACKAGES and top not in ALLOWED[_top(name)]:
                found.append(f"{name} imports {dep} (upward)")
            if top == "click" and not _within(name, CLICK_ROOMS):
                found.append(f"{name} imports {dep} (click outside the CLI)")
            if top == "tracker" and _top(name) == "observe" and not _within(name, TRACKER_USERS):
                found.append(f"{name} imports {dep} (tracker outside the composition root)")
            if _top(name) == "tracker" and top == "observe" and not _within(dep, TRACKER_USES):
                found.append(f"{name} imports {dep} (tracker uses only {', '.join(TRACKER_USES)})")
            if _within(name, (CHANNEL,)) and top not in stdlib and not _within(dep, CHANNEL_MAY_IMPORT):
                found.append(f"{name} imports {dep} (the channel stays light)")
    return sorted(set(found))


def cycles(g: Graph) -> list[str]:
    """Return each import cycle among the project modules in ``g``."""
    project = {name: {d for d in deps if d in g} for name, deps in g.items()}
    found: list[str] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(project.get(node, ())):
            # a package's __init__ importing its own submodules is not a cycle of ideas
            if node == dep.rpartition(".")[0] or dep == node.rpartition(".")[0]:
                continue
            if state.get(dep) == 1:
                found.append(" -> ".join([*stack[stack.index(dep) :], dep]))
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for name in sorted(project):
        if name not in state:
            visit(name)
    return found


class TestWalls:
    def test_the_tree_keeps_every_wall(self) -> None:
        """No module of the tree imports across a wall."""
        assert [] == violations(graph())

    def test_no_import_cycles(self) -> None:
        """No module reaches itself through imports (lazy, function-level imports included)."""
        assert [] == cycles(graph())

    def test_the_channel_client_never_loads_pyarrow_or_click(self) -> None:
        """The receipt/step client imports only the standard library and the channel itself."""
        deps = graph()["observe.channel.client"]
        heavy = {d for d in deps if _top(d) in {"pyarrow", "click", "gates", "tracker"}}
        assert set() == heavy | {d for d in deps if _top(d) == "aos" and not _within(d, CHANNEL_MAY_IMPORT)}


class TestPlantedViolations:
    """Each wall fails on a violation planted into the real graph."""

    def planted(self, name: str, source: str) -> list[str]:
        """Return the violations the real graph shows once ``name`` also imports what ``source`` does."""
        g = graph()
        g.setdefault(name, set()).update(imports_of(source))
        return [v for v in violations(g) if v.startswith(name + " ")]

    def test_gates_importing_the_recorder(self) -> None:
        """gates importing observe is found, also inside a function."""
        found = self.planted("gates.engine", "def f():\n    from observe.recorder.record import record\n")
        assert "gates.engine imports observe.recorder.record (upward)" in found

    def test_aos_importing_gates(self) -> None:
        """aos importing gates is found."""
        assert any("aos.reader imports gates" in f for f in self.planted("aos.reader", "import gates.verdict\n"))

    def test_click_outside_the_cli(self) -> None:
        """click imported by the recorder is found."""
        found = self.planted("observe.recorder.capture", "import click\n")
        assert ["observe.recorder.capture imports click (click outside the CLI)"] == found

    def test_tracker_imported_by_the_recorder(self) -> None:
        """tracker imported outside observe.cli is found."""
        found = self.planted("observe.recorder.gating", "from tracker import db\n")
        assert any("tracker outside the composition root" in f for f in found)

    def test_click_in_the_tracker(self) -> None:
        """click imported by the tracker library is found: its command group lives in observe.cli."""
        found = self.planted("tracker.records", "import click\n")
        assert ["tracker.records imports click (click outside the CLI)"] == found

    def test_tracker_using_the_recorder(self) -> None:
        """tracker reaching into the recorder is found."""
        found = self.planted("tracker.attach", "from observe.recorder import record\n")
        assert any("tracker uses only" in f for f in found)

    def test_a_heavy_channel(self) -> None:
        """pyarrow imported by the channel is found."""
        found = self.planted("observe.channel.client", "import pyarrow\n")
        assert ["observe.channel.client imports pyarrow (the channel stays light)"] == found

    def test_a_cycle(self) -> None:
        """A planted cycle between two rooms is found."""
        g = graph()
        g["aos.reader"] = {*g["aos.reader"], "aos.writer"}
        g["aos.writer"] = {*g["aos.writer"], "aos.reader"}
        assert any("aos.reader" in c and "aos.writer" in c for c in cycles(g))
