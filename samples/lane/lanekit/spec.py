"""The learner's fixed definition: data set, split, rates, membership, identity.

Everything a peer must agree on before any value is combined is here. The
learner identity is a digest of the lane, the rule, the data and the combine
order; the rate and the membership are checked separately so a refusal can say
which one differs.

A run has N >= 2 owner roles (``owner-0`` ... ``owner-{N-1}``, one per GPU):
the learner has N coordinates (features) and N(N+1)/2 samples, owner j holding
the j+1 samples after owner j-1's, so no two owners hold the same count and a
combine that averages owners instead of weighting by samples differs. At N = 2
the data are the two-GPU qualification's three samples of two features, unchanged
(:data:`DATA_X`, :data:`DATA_Y`); for N > 2 they come from :func:`dataset`'s
formula, which samples/lane/oracle.py repeats on its own.
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
    "dataset",
    "default_spec",
    "hexf",
    "owners_of",
    "split_of",
    "unhexf",
]

LANES = ("partitioned", "coordinates", "independent")

# Three samples of two features each; binary64 values that are exact in decimal (the data at N = 2).
DATA_X: tuple[tuple[float, ...], ...] = ((1.0, 2.0), (0.5, -1.5), (-2.0, 0.25))
DATA_Y: tuple[float, ...] = (3.0, -1.0, 0.5)


def owners_of(count: int) -> tuple[str, ...]:
    """The owner roles of a run on ``count`` GPUs, in role order."""
    if not isinstance(count, int) or count < 2:
        raise ValueError(f"a run has at least 2 owner roles, not {count!r}")
    return tuple(f"owner-{j}" for j in range(count))


def split_of(count: int) -> tuple[tuple[int, ...], ...]:
    """The samples each of ``count`` owners holds: owner j the j+1 samples after owner j-1's."""
    first = [j * (j + 1) // 2 for j in range(len(owners_of(count)))]
    return tuple(tuple(range(start, start + j + 1)) for j, start in enumerate(first))


def dataset(count: int) -> tuple[tuple[tuple[float, ...], ...], tuple[float, ...]]:
    """The learner's samples (x rows of ``count`` features, y) for ``count`` owners; exact binary64 quarters."""
    if len(owners_of(count)) == 2:
        return DATA_X, DATA_Y
    samples = count * (count + 1) // 2
    x = tuple(tuple(((5 * i + 3 * k + 1) % 9 - 4) / 4.0 for k in range(count)) for i in range(samples))
    y = tuple(((7 * i + 2) % 11 - 5) / 4.0 for i in range(samples))
    return x, y


# The participants (processes) and the roles (executables, one per GPU) of a two-GPU run; a run on
# N GPUs has owners_of(N) (LearnerSpec.owners, LearnerSpec.members).
OWNERS = owners_of(2)
MEMBERS = ("coordinator", *OWNERS)
ROLES = OWNERS
# The coordinator is a host-side process started from owner-0's executable,
# bound to owner-0's device (as in the seed's "coordinator was an RTX 3090").
COORDINATOR_HOST = "owner-0"
# Unequal split: owner-0 holds one sample, owner-1 holds two.
SPLIT: tuple[tuple[int, ...], ...] = split_of(2)
# The declared combine order: contributions are added in exactly this order (owner order).
COMBINE_ORDER = OWNERS

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
            count = len(self.owners)
            rule = RULES[self.lane] if count == 2 else RULES[self.lane].replace("two-coordinate", f"{count}-coordinate")
            object.__setattr__(self, "rule", rule)

    @property
    def owners(self) -> tuple[str, ...]:
        """The owner roles (every member but the coordinator), in role order."""
        return tuple(m for m in self.members if m != "coordinator")

    @property
    def data(self) -> tuple[tuple[tuple[float, ...], ...], tuple[float, ...]]:
        """The samples (x rows, y) of this learner: :func:`dataset` of its owner count."""
        return dataset(len(self.owners))

    @property
    def learner_id(self) -> str:
        """Digest of lane, rule, data, momentum and combine order (not rate, not membership)."""
        x, y = self.data
        body = {
            "lane": self.lane,
            "rule": self.rule,
            "x": [[hexf(a) for a in row] for row in x],
            "y": [hexf(v) for v in y],
            "momentum": hexf(self.momentum),
            "combine_order": list(self.combine_order),
        }
        return hashlib.sha256(canonical_json(body)).hexdigest()

    def membership(self, epoch: int) -> dict[str, object]:
        """The membership a hello carries: who, which samples, which epoch."""
        return {"epoch": epoch, "members": list(self.members), "split": [list(s) for s in self.split]}

    def owner_samples(self, role: str) -> tuple[int, ...]:
        """The sample indices an owner holds."""
        return self.split[list(self.owners).index(role)]

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


def default_spec(lane: str, owners: int = 2) -> LearnerSpec:
    """The lane's learner as the qualification runs it, on ``owners`` GPUs (one owner role each)."""
    roles = owners_of(owners)
    rate, momentum = (0.3, 0.7) if lane == "independent" else (0.05, 0.9)
    return LearnerSpec(
        lane=lane,
        rate=rate,
        momentum=momentum,
        members=("coordinator", *roles),
        split=split_of(owners),
        combine_order=roles,
    )
