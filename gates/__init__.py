"""gates: the policy engine, the built-in gates and their verdicts.

A gate (``Gate``, read from TOML by ``load_gate`` or found by ``resolve_gate``)
is evaluated over a stream's events by ``evaluate`` to a ``Verdict`` of
``Check``s (``evaluate_events`` never raises: the verdict must be sealed).
``gates`` is a pure library over events: it imports ``aos`` only, and the
recorder (``observe.recorder.gating.run_gate``) composes the two. docs/GATES.md documents
the language. Names load lazily, so the light commands that import the CLI never pay for
the engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gates.checks import register
    from gates.engine import evaluate
    from gates.evaluation import evaluate_events, evaluate_stream
    from gates.evidence import Evidence
    from gates.language import Gate, load_gate
    from gates.refusals import GateFileError, UnknownGate
    from gates.registry import builtin_gates, resolve_gate
    from gates.typing import Outcome
    from gates.verdict import Check, Verdict

__all__ = [
    "Check",
    "Evidence",
    "Gate",
    "GateFileError",
    "Outcome",
    "UnknownGate",
    "Verdict",
    "builtin_gates",
    "evaluate",
    "evaluate_events",
    "evaluate_stream",
    "load_gate",
    "register",
    "resolve_gate",
]

_LAZY = {
    "Check": "gates.verdict",
    "Verdict": "gates.verdict",
    "Evidence": "gates.evidence",
    "Gate": "gates.language",
    "GateFileError": "gates.refusals",
    "load_gate": "gates.language",
    "evaluate_events": "gates.evaluation",
    "evaluate_stream": "gates.evaluation",
    "Outcome": "gates.typing",
    "UnknownGate": "gates.refusals",
    "builtin_gates": "gates.registry",
    "resolve_gate": "gates.registry",
    "evaluate": "gates.engine",
    "register": "gates.checks",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gates' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
