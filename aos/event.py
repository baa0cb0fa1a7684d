"""The event: one row of an AOS stream, and the kinds the format knows."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aos.kinds import REGISTRY
from aos.refusals import StreamSchema

__all__ = ["KINDS", "Event"]

#: Every kind docs/FORMAT.md names (aos.kinds.REGISTRY). Readers must accept others too.
KINDS: frozenset[str] = frozenset(REGISTRY)


_RAW_DECODE = json.JSONDecoder().raw_decode


@dataclass(frozen=True, slots=True)
class Event:
    """One recorded event, exactly as stored.

    ``attrs_json`` is the canonical JSON text that was hashed; ``attrs`` is it
    parsed. ``hash`` is the 32-byte chain hash of this event.
    """

    seq: int
    wall_ns: int
    mono_ns: int
    kind: str
    step: str | None
    attrs_json: str
    data: bytes | None
    hash: bytes
    _attrs: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def attrs(self) -> dict[str, Any]:
        """The attrs object (parsed once, on first use).

        Raises ``stream-schema`` when the stored text is not a JSON object.
        """
        cached = self._attrs
        if cached is None:
            text = self.attrs_json
            try:
                try:  # json.loads's own parse without its wrapper (a reader parses every event's attrs)
                    parsed, end = _RAW_DECODE(text)
                    if end != len(text):
                        raise ValueError(text)
                except ValueError:
                    parsed = json.loads(text)  # loads' answer: whitespace around it, or its exact error
            except (ValueError, RecursionError) as exc:
                raise StreamSchema(f"seq {self.seq}: attrs is not JSON ({exc})") from exc
            if not isinstance(parsed, dict):
                raise StreamSchema(f"seq {self.seq}: attrs is a JSON {type(parsed).__name__}, not an object")
            cached = parsed
            object.__setattr__(self, "_attrs", cached)
        return cached
