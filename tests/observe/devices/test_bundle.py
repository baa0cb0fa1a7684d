"""The node observer's bundle carries every module its modules import (the standard library aside).

A node runs the bundle with nothing installed: a bundled module importing a project module the bundle
lacks fails there, on the node, mid-recording. This reads each bundled module's imports (every ``import``
statement, those inside functions too) and names what is missing; a planted omission shows the check can fail.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable

from observe.devices.bundle import _MODULES, _PACKAGES, _source, build_bundle


def _imports(source: bytes) -> set[str]:
    """Every absolute module name ``source`` imports (``from P import N`` also as ``P.N``: N may be a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a bundled module imports relatively"
            assert node.module is not None
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def missing(modules: Iterable[tuple[str, str]], packages: Iterable[str]) -> list[str]:
    """``MODULE (imported by FILE)`` for each import of a bundled module that neither the standard library
    nor the bundle provides."""
    modules = list(modules)
    package_names = {name.removesuffix("/__init__.py").replace("/", ".") for name in packages}
    bundled = {module for _name, module in modules} | package_names
    out = []
    for name, module in modules:
        for imported in sorted(_imports(_source(module))):
            if imported.split(".")[0] in sys.stdlib_module_names or imported in bundled:
                continue
            parent = imported.rpartition(".")[0]
            if parent in bundled and parent not in package_names:
                continue  # ``from MODULE import NAME``: a name of a bundled module, not a module
            out.append(f"{imported} (imported by {name})")
    return out


def test_the_bundle_carries_every_module_its_modules_import() -> None:
    assert missing(_MODULES, _PACKAGES) == []


def test_a_module_left_out_of_the_bundle_is_named() -> None:
    without = [(name, module) for name, module in _MODULES if module != "observe.devices.identity"]
    found = missing(without, _PACKAGES)
    assert "observe.devices.identity (imported by observe/devices/observers.py)" in found
    assert "observe.devices.identity (imported by observe/devices/observing.py)" in found


def test_the_bundle_holds_its_modules() -> None:
    import io
    import zipfile

    names = set(zipfile.ZipFile(io.BytesIO(build_bundle().data)).namelist())
    assert {name for name, _module in _MODULES} | set(_PACKAGES) == names
