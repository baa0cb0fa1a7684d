"""The layering that shows the trust boundary: aos <- gates <- observe, and no import cycles.

``aos`` (the format) imports nothing of the project; ``gates`` (a pure library over
events) imports ``aos`` only, never the recorder; ``observe`` composes the two.
Imports inside functions count too: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.paths import ROOT

PACKAGES = ("aos", "gates", "observe", "tracker")
ALLOWED = {
    "aos": {"aos"},
    "gates": {"aos", "gates"},
    "observe": {"aos", "gates", "observe", "tracker"},
    "tracker": {"aos", "gates", "observe", "tracker"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every project module ``path`` imports, at any depth (resolved to modules that exist)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name.split(".")[0] in PACKAGES and name in MODULES:
                found.add(name)
    return found


MODULES = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def graph() -> dict[str, set[str]]:
    return {name: imports_of(path) - {name} for name, path in MODULES.items()}


def test_packages_import_only_the_layers_below() -> None:
    """aos imports no project package; gates only aos; observe and tracker use each other (tracker: observe.store)."""
    wrong = [
        f"{name} imports {dep}"
        for name, deps in graph().items()
        for dep in deps
        if dep.split(".")[0] not in ALLOWED[name.split(".")[0]]
    ]
    assert [] == sorted(wrong)


def test_no_import_cycles() -> None:
    """No module reaches itself through imports (lazy, function-level imports included)."""
    g = graph()
    cycles: list[str] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(g.get(node, ())):
            # a package's __init__ importing its own submodules is not a cycle of ideas
            if node == dep.rpartition(".")[0] or dep == node.rpartition(".")[0]:
                continue
            if state.get(dep) == 1:
                cycles.append(" -> ".join([*stack[stack.index(dep) :], dep]))
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for name in sorted(g):
        if name not in state:
            visit(name)
    assert [] == cycles


def test_the_check_sees_a_violation() -> None:
    """The checker itself works: gates importing the recorder would be found."""
    tree_text = "def f():\n    from observe.recorder.record import record\n"
    tree = ast.parse(tree_text)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert node.module in MODULES
    assert "observe" not in ALLOWED["gates"]
