"""Refusal names: each is one class, registered by name, listed in docs/REFUSALS.md; aos names only the format's."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from aos import refusals
from aos.refusals import Refusal, refusal_by_name, registered
from tests.helpers.paths import ROOT

PACKAGES = ("aos", "gates", "observe", "tracker")
REFUSAL_MODULES = ("aos.refusals", "gates.refusals", "observe.refusals", "tracker.refusals")


def project_refusals() -> dict[str, type[Refusal]]:
    """Every refusal class the four packages register, by name (their refusals modules imported)."""
    for module in REFUSAL_MODULES:
        importlib.import_module(module)
    return {name: cls for name, cls in registered().items() if cls.__module__.split(".")[0] in PACKAGES}


def documented() -> dict[str, str]:
    """The names in docs/REFUSALS.md's table, each with its package column."""
    doc = (ROOT / "docs" / "REFUSALS.md").read_text(encoding="utf-8")
    return dict(re.findall(r"^\| `([a-z0-9-]+)` \| `([a-z]+)` \|", doc, re.MULTILINE))


def refusal_names_defined_in(path: Path) -> set[str]:
    """The ``name = "..."`` of every class a module defines that derives from a refusal class."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef) or not node.bases:
            continue
        for stmt in node.body:
            if (
                isinstance(stmt, ast.Assign)
                and [getattr(t, "id", None) for t in stmt.targets] == ["name"]
                and isinstance(stmt.value, ast.Constant)
            ):
                names.add(str(stmt.value.value))
    return names


def test_every_registered_name_is_in_the_docs_table() -> None:
    """Each name a package registers is a row of docs/REFUSALS.md, under the package that defines it."""
    known = {name: cls.__module__.split(".")[0] for name, cls in project_refusals().items()}
    table = documented()
    assert {} == {name: package for name, package in known.items() if table.get(name) != package}


def test_every_class_lives_in_its_packages_refusals_module() -> None:
    """A refusal class is defined in its package's refusals module, nowhere else in the package."""
    wrong = sorted(f"{cls.__module__}.{cls.__qualname__}" for cls in project_refusals().values())
    wrong = [w for w in wrong if w.split(".")[1] != "refusals"]
    assert [] == wrong


def test_aos_defines_only_stream_names() -> None:
    """aos.refusals, the format's package, names only ``stream-*`` refusals (and the base's ``refused``)."""
    defined = refusal_names_defined_in(ROOT / "aos" / "refusals.py")
    assert [] == sorted(n for n in defined if not n.startswith("stream-") and n != "refused")
    assert {cls.name for cls in vars(refusals).values() if isinstance(cls, type) and issubclass(cls, Refusal)} - {
        "refused"
    } == {n for n, cls in registered().items() if cls.__module__ == "aos.refusals"}


def test_no_module_outside_the_refusals_modules_names_a_refusal() -> None:
    """No other module of the packages defines a class with a refusal-shaped ``name`` (read from the source)."""
    names = set(project_refusals())
    found = {
        str(path.relative_to(ROOT)): sorted(refusal_names_defined_in(path) & names)
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if path.name != "refusals.py"
    }
    assert {} == {path: hits for path, hits in found.items() if hits}


def test_a_name_maps_back_to_its_one_class() -> None:
    """The one lookup gives each registered name's class back, across packages; an unknown name is a KeyError."""
    for name, cls in project_refusals().items():
        assert cls is refusal_by_name(name)
    assert "query-sql" == refusal_by_name("query-sql").name
    with pytest.raises(KeyError):
        refusal_by_name("no-such-refusal")


def test_a_duplicate_name_raises_at_class_creation() -> None:
    """A second class that claims a taken name raises TypeError, and the name keeps its first class."""
    first = refusal_by_name("stream-chain")
    with pytest.raises(TypeError, match="'stream-chain'"):

        class Forged(Refusal):
            name = "stream-chain"

    assert first is refusal_by_name("stream-chain")


def test_a_class_without_its_own_name_raises() -> None:
    """A subclass that names no refusal of its own (it would inherit its base's) raises TypeError."""
    with pytest.raises(TypeError, match="names no refusal"):

        class Nameless(refusal_by_name("stream-chain")):  # type: ignore[misc]
            pass


def test_an_abstract_base_takes_no_name() -> None:
    """A base declared abstract is not registered: the tracker's base name ``tracker-refused`` maps to nothing."""
    importlib.import_module("tracker.refusals")
    assert "tracker-refused" not in registered()
