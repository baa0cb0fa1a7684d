"""The tool's own modules, and every module they import, imported before the command starts.

The command runs as the recorder's user, who can write the files the tool was installed as (a
virtual environment, a user's site-packages, its dependencies beside it). A module the recorder
first imported after the command started would run what the command wrote there, inside the
recorder, which holds the seal's key and seals the verdict. So every module of the tool's
packages is imported first, and every module any of them imports anywhere (imports inside
functions too: they are read from each module's source). A module that cannot be imported (an
optional dependency not installed) is left out: it cannot be imported later either.
"""

from __future__ import annotations

import ast
import codecs
import importlib
import pkgutil
import sys

__all__ = ["PACKAGES", "ROOTS", "import_own_modules"]

#: The tool's packages (the tracker's is not the recorder's).
PACKAGES = ("aos", "gates", "observe")

#: What a recording runs from the command's start to the seal: the recorder, the gate engine, the format,
#: the CI outputs. Every module of these, and of the tool's packages any of them imports (at the top or inside a
#: function, transitively), is imported first; the rest of the tool (the query engine, the report's page, the
#: interop writers) is not the recorder's unless one of these imports it, and is not loaded for nothing.
ROOTS = ("aos", "gates", "observe.recorder", "observe.ci", "observe.devices", "observe.secrets", "observe.channel")


def _imported_names(path: str, package: str) -> set[str]:
    """The absolute names of the modules the source at ``path`` (a module of ``package``) imports."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            if module:
                names.add(module)
                names.update(f"{module}.{alias.name}" for alias in node.names if alias.name != "*")
    return names


def _own(name: str) -> bool:
    return name.split(".", 1)[0] in PACKAGES


def import_own_modules() -> list[str]:
    """Import every module of :data:`ROOTS`, every module of the tool they import (transitively) and every other
    module any of those imports; the names left out."""
    left: list[str] = []
    todo: list[str] = []
    for name in ROOTS:
        package = importlib.import_module(name)
        todo.append(name)
        if hasattr(package, "__path__"):
            todo += [i.name for i in pkgutil.walk_packages(package.__path__, prefix=f"{name}.")]
    done: set[str] = set()
    others: set[str] = set()
    while todo:
        name = todo.pop()
        if name in done or name.rsplit(".", 1)[-1] == "__main__":
            continue
        done.add(name)
        try:
            module = importlib.import_module(name)
        except ImportError:
            left.append(name)
            continue
        source = getattr(module, "__file__", None)
        if source and source.endswith(".py"):
            parent = name if hasattr(module, "__path__") else name.rsplit(".", 1)[0]
            for found in _imported_names(source, parent):
                if _own(found):
                    todo.append(found)
                else:
                    others.add(found)
    for name in sorted(others):
        if name in sys.modules or name.split(".", 1)[0] in ("__future__",):
            continue
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a name that is an attribute, or a dependency that is absent
            left.append(name)
    for encoding in ("ascii", "latin-1", "utf-8", "utf-16", "utf-32"):  # codecs are modules found by name
        codecs.lookup(encoding)
    return left
