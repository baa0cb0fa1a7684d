"""Environment variable names: each one the tool reads or sets is a constant of observe/env.py, written nowhere else."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from observe import env
from tests.helpers.paths import ROOT

PACKAGES = ("aos", "gates", "observe", "tracker")
#: What an environment variable of the tool, or of a CI system it reads, looks like.
NAME = re.compile(r"^(ALPHA_|AOS_|GITHUB_|GITLAB_|BUILDKITE|CI_|ARROW_DEFAULT_)[A-Z0-9_]*$")
#: Where such a name may still be written, and why: gates may not import observe (the lane configuration
#: variables of the built-in lanes' test doubles), and the recording's environment policy is a list of
#: names to keep, not variables the tool reads.
ELSEWHERE = {"observe/env.py", "gates/testing.py", "observe/secrets/envpolicy.py"}
#: The module of a CI system spells the names of its CI: those it records and maps to the OTLP
#: attributes of the *recorded* environment (stream.open's); the ones the tool reads are still constants here.
CI_SYSTEMS = "observe/ci/systems/"


def literals(path: Path) -> set[str]:
    """The string constants of a module that look like such a variable name (``__all__``'s are Python names)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    exported = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]
        for n in ast.walk(node.value)
    }
    strings = {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in exported
    }
    return {s for s in strings if NAME.match(s)}


def test_no_module_writes_a_variable_name_of_its_own() -> None:
    """Outside observe/env.py (and the named exceptions), no module spells an environment variable's name."""
    found = {
        str(path.relative_to(ROOT)): sorted(literals(path))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if str(path.relative_to(ROOT)) not in ELSEWHERE and not str(path.relative_to(ROOT)).startswith(CI_SYSTEMS)
    }
    assert {} == {path: names for path, names in found.items() if names}


def test_env_imports_nothing() -> None:
    """observe/env.py imports nothing but ``__future__``: the light receipt client loads it on every receipt."""
    tree = ast.parse((ROOT / "observe" / "env.py").read_text(encoding="utf-8"))
    imported = [
        getattr(node, "module", None) or [a.name for a in getattr(node, "names", [])]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
    ]
    assert ["__future__"] == imported


def test_names_are_unique() -> None:
    """No two constants of observe/env.py name the same variable."""
    values = [
        value
        for group in vars(env).values()
        if isinstance(group, type)
        for key, value in vars(group).items()
        if key.isupper() and isinstance(value, str) and not key.endswith(("_PREFIX", "_SUFFIX"))
    ]
    assert sorted(set(values)) == sorted(values)
