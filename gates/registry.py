"""Where gates come from: the built-ins shipped as TOML, and ``--gate-file``."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from gates.language import Gate, load_gate, parse_gate_text
from gates.refusals import GateFileError, UnknownGate

__all__ = ["RESERVED_SCOPES", "UnknownGate", "builtin_gates", "gate_names", "load_user_gate", "resolve_gate"]


@cache
def builtin_gates() -> dict[str, Gate]:
    """The built-in gates, by name (read once from ``gates/builtin/*.toml``)."""
    out: dict[str, Gate] = {}
    folder = resources.files("gates.builtin")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            gate = parse_gate_text(entry.read_text(encoding="utf-8"), f"builtin:{entry.name}")
            out[gate.name] = gate
    return out


#: Scopes only built-in gates may give: the tracker records a physical pass on them.
RESERVED_SCOPES = frozenset({"physical"})


def _folded(text: str) -> str:
    """What a name looks like to a reader: Unicode-compatibility folded, case folded, without
    spaces, separators, or invisible characters (``Exit_Zero``, `` exit-zero``, ``physical `` fold
    to the name they imitate)."""
    import unicodedata

    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(c for c in folded if c.isalnum())


def load_user_gate(path: str | Path) -> Gate:
    """A gate from a user's file: it may not shadow a built-in, nor look like one, nor claim a
    reserved scope in any spelling."""
    gate = load_gate(path)
    for builtin in builtin_gates():
        if gate.name == builtin or _folded(gate.name) == _folded(builtin):
            raise GateFileError(f"{gate.source}: gate {gate.name!r} would pass for the built-in gate {builtin!r}")
    scopes = {gate.scope, *(p.scope for p in gate.parts if p.scope)}
    reserved = sorted(s for s in scopes if _folded(s) in {_folded(r) for r in RESERVED_SCOPES})
    if reserved:
        raise GateFileError(f"{gate.source}: scope {reserved[0]!r} is reserved for the built-in device gates")
    return gate


def gate_names() -> list[str]:
    return sorted(builtin_gates())


def resolve_gate(name: str, gate_files: tuple[str | Path, ...] | list[str | Path] = ()) -> Gate:
    """The gate ``name``: from the given gate files first, else a built-in.

    Raises ``GateFileError`` for a malformed file and ``UnknownGate`` when no
    gate has that name.
    """
    loaded = [load_user_gate(p) for p in gate_files]
    for gate in loaded:
        if gate.name == name:
            return gate
    builtin = builtin_gates().get(name)
    if builtin is not None:
        return builtin
    known = sorted({*builtin_gates(), *(g.name for g in loaded)})
    near = [k for k in known if _folded(k) == _folded(name)]
    hint = f"; did you mean {near[0]!r}? Gate names match exactly" if near else ""
    raise UnknownGate(f"no gate named {name!r} (known: {', '.join(known)}){hint}")
