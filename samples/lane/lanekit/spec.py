"""The learner's fixed definition: data set, split, rates, membership, identity.

Everything a peer must agree on before any value is combined is here. The
learner identity is a digest of the lane, the rule, the data and the combine
order; the rate and the membership are checked separately so a refusal can say
which one differs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace

__all__ = [
    "COMBINE_ORDER",
    "COORDINATOR_HOST",
    "DATA_X",
    "DATA_Y",
    "LANES",
    "MEMBERS",
    "OWNERS",
    "ROLES",
    "SPLIT",
    "LearnerSpec",
    "canonical_json",
    "default_spec",
    "hexf",
    "unhexf",
]

LANES = ("partitioned", "coordinates", "independent")

# Three samples of two features each; binary64 values that are exact in decimal.
DATA_X: tuple[tuple[float, float], ...] = ((1.0, 2.0), (0.5, -1.5), (-2.0, 0.25))
DATA_Y: tuple[float, ...] = (3.0, -1.0, 0.5)

# The participants (processes) of a run, and the roles (executables, one per GPU).
MEMBERS = ("coordinator", "owner-0", "owner-1")
OWNERS = ("owner-0", "owner-1")
ROLES = OWNERS
# The coordinator is a host-side process started from owner-0's executable,
# bound to owner-0's device (as in the seed's "coordinator was an RTX 3090").
COORDINATOR_HOST = "owner-0"
# Unequal split: owner-0 holds one sample, owner-1 holds two.
SPLIT: tuple[tuple[int, ...], ...] = ((0,), (1, 2))
# The declared combine order: contributions are added in exactly this order.
COMBINE_ORDER = ("owner-0", "owner-1")

RULES = {
    "partitioned": "least-squares momentum; parameters replicated, optimizer state partitioned by coordinate",
    "coordinates": "least-squares momentum; two-coordinate predictor replicated on every owner",
    "independent": "per-owner damped local rule toward the owner's sample mean; no gradient",
}


def canonical_json(value: object) -> bytes:
    """The one JSON encoding used for digests, frames and files."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


def hexf(value: float) -> str:
    """A binary64 value as an exact, readable hex float string."""
    return float(value).hex()


def unhexf(text: str) -> float:
    """The inverse of :func:`hexf`; raises ValueError on anything else."""
    if not isinstance(text, str):
        raise ValueError(f"not a hex float: {text!r}")
    return float.fromhex(text)


@dataclass(frozen=True)
class LearnerSpec:
    """What a role was built for; baked into its executable's manifest."""

    lane: str
    rate: float = 0.05
    momentum: float = 0.9
    members: tuple[str, ...] = MEMBERS
    split: tuple[tuple[int, ...], ...] = SPLIT
    combine_order: tuple[str, ...] = COMBINE_ORDER
    rule: str = field(default="")

    def __post_init__(self) -> None:
        if self.lane not in LANES:
            raise ValueError(f"unknown lane {self.lane!r} (one of {', '.join(LANES)})")
        if not self.rule:
            object.__setattr__(self, "rule", RULES[self.lane])

    @property
    def learner_id(self) -> str:
        """Digest of lane, rule, data, momentum and combine order (not rate, not membership)."""
        body = {
            "lane": self.lane,
            "rule": self.rule,
            "x": [[hexf(a) for a in row] for row in DATA_X],
            "y": [hexf(v) for v in DATA_Y],
            "momentum": hexf(self.momentum),
            "combine_order": list(self.combine_order),
        }
        return hashlib.sha256(canonical_json(body)).hexdigest()

    def membership(self, epoch: int) -> dict[str, object]:
        """The membership a hello carries: who, which samples, which epoch."""
        return {"epoch": epoch, "members": list(self.members), "split": [list(s) for s in self.split]}

    def owner_samples(self, role: str) -> tuple[int, ...]:
        """The sample indices an owner holds."""
        return self.split[list(OWNERS).index(role)]

    def to_json(self) -> dict[str, object]:
        """The manifest form (rates as exact hex floats)."""
        data = asdict(self)
        data["rate"] = hexf(self.rate)
        data["momentum"] = hexf(self.momentum)
        data["members"] = list(self.members)
        data["split"] = [list(s) for s in self.split]
        data["combine_order"] = list(self.combine_order)
        data["learner_id"] = self.learner_id
        return data

    @classmethod
    def from_json(cls, data: dict[str, object]) -> LearnerSpec:
        """Read the manifest form back."""
        return cls(
            lane=str(data["lane"]),
            rate=unhexf(str(data["rate"])),
            momentum=unhexf(str(data["momentum"])),
            members=tuple(str(m) for m in data["members"]),  # type: ignore[attr-defined]
            split=tuple(tuple(int(i) for i in s) for s in data["split"]),  # type: ignore[attr-defined]
            combine_order=tuple(str(m) for m in data["combine_order"]),  # type: ignore[attr-defined]
            rule=str(data["rule"]),
        )

    def with_changes(self, **changes: object) -> LearnerSpec:
        """A variant (tests build peers for another rate or membership)."""
        return replace(self, **changes)  # type: ignore[arg-type]


def default_spec(lane: str) -> LearnerSpec:
    """The lane's learner as the qualification runs it."""
    if lane == "independent":
        return LearnerSpec(lane=lane, rate=0.3, momentum=0.7)
    return LearnerSpec(lane=lane)
