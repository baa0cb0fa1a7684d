"""The gate language's refusals: a gate file that is not valid, a gate name that names no gate.

Each is a :class:`aos.refusals.Refusal`, registered by name (docs/REFUSALS.md).
The CLI reports both as usage errors (exit 2) before the command runs.
"""

from __future__ import annotations

from aos.refusals import Refusal

__all__ = ["GateFileError", "UnknownGate"]


class GateFileError(Refusal):
    """A gate file that is not valid in the gate language."""

    name = "gate-file"


class UnknownGate(GateFileError):
    """No gate has that name."""

    name = "gate-unknown"
