"""The suite's own house rules: one helper for each habit, no copied fixture, no sleep that guesses."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.paths import ROOT

TESTS = ROOT / "tests"


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8"))) for path in sorted(TESTS.rglob("*.py"))]


def _functions(tree: ast.Module) -> list[ast.FunctionDef]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)]


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    return body[1:] if docstring else body


def test_no_fixture_is_a_copy() -> None:
    """No two fixtures have the same arguments and body (docstrings aside): a shared one lives in a conftest.py."""
    seen: dict[str, list[str]] = {}
    for path, tree in _modules():
        for fn in _functions(tree):
            if any("fixture" in ast.unparse(d) for d in fn.decorator_list):
                key = ast.dump(fn.args) + ast.dump(ast.Module(body=_without_docstring(fn.body), type_ignores=[]))
                seen.setdefault(key, []).append(f"{path.relative_to(ROOT)}::{fn.name}")
    assert [] == [names for names in seen.values() if len(names) > 1]


def test_one_helper_expects_a_refusal() -> None:
    """Only tests/helpers/refusals.py wraps ``pytest.raises(Refusal)`` in a helper; tests call it or say it inline."""
    helpers = []
    for path, tree in _modules():
        if path == TESTS / "helpers" / "refusals.py":
            continue
        for fn in _functions(tree):
            if fn.name.startswith("test_"):
                continue
            withs = [node for node in ast.walk(fn) if isinstance(node, ast.With)]
            if any("pytest.raises(Refusal)" in ast.unparse(item.context_expr) for w in withs for item in w.items):
                helpers.append(f"{path.relative_to(ROOT)}::{fn.name}")
    assert [] == helpers


def test_the_hang_tests_wait_on_conditions() -> None:
    """tests/observe/recorder/test_hangs.py waits for what the other process does, never a guessed time."""
    tree = ast.parse((TESTS / "observe" / "recorder" / "test_hangs.py").read_text(encoding="utf-8"))
    sleeps = [
        node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call) and ast.unparse(node.func) == "time.sleep"
    ]
    assert [] == sleeps
