"""Named refusals of a lane role, printed as ``refused: NAME: detail``.

The three names the device gates match on are ``device-uuid``,
``nvidia-plan-host`` and ``checkpoint-chunk`` (docs/GATES.md, "Lane receipts").
Each refusal has its own exit code so a lane script can tell them apart.

The driver's own refusals on a node reached over SSH (``lanekit.remote``) are
``host-key-unknown``, ``host-key-changed``, ``node-unreachable`` and
``remote-digest``: the lane stops there and keeps every output it has.

The preflight's refusals of the lane's own setup, before any device work:
``lane-config`` (the config cannot be read or is not valid), ``minor-missing``
(a bound minor selects no GPU) and ``minor-bound-twice`` (two roles bind one
minor of one host). With ``host-key-unknown``, ``host-key-changed``
and ``node-unreachable`` they are the ``[part.setup]`` refusals of the device
gates: a lane that stops at one did not run (docs/GATES.md).
"""

from __future__ import annotations

__all__ = [
    "EXIT_CODES",
    "CheckpointChunk",
    "CheckpointEpoch",
    "CheckpointLearner",
    "DeviceUuid",
    "HostKeyChanged",
    "HostKeyUnknown",
    "LaneConfig",
    "LaneRefusal",
    "MinorBoundTwice",
    "MinorMissing",
    "NodeUnreachable",
    "NvidiaPlanHost",
    "PeerIdentity",
    "RemoteDigest",
]


class LaneRefusal(Exception):
    """A named, expected refusal; ``name`` is stable, ``detail`` is for people."""

    name = "refused"
    exit_code = 1

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail

    def diagnostics(self) -> str:
        """The one line printed on stderr."""
        return f"refused: {self.name}: {self.detail}"


class DeviceUuid(LaneRefusal):
    """The device at the bound minor is not the bound UUID (or there is none)."""

    name = "device-uuid"
    exit_code = 20


class NvidiaPlanHost(LaneRefusal):
    """The device at the bound minor is not the product the role was built for."""

    name = "nvidia-plan-host"
    exit_code = 21


class CheckpointChunk(LaneRefusal):
    """A checkpoint chunk is unreadable, non-finite or fails its checksum."""

    name = "checkpoint-chunk"
    exit_code = 22


class PeerIdentity(LaneRefusal):
    """A peer's first message names a different learner, rate or membership."""

    name = "peer-identity"
    exit_code = 23


class CheckpointEpoch(LaneRefusal):
    """A resume does not advance the membership epoch past the checkpoint's."""

    name = "checkpoint-epoch"
    exit_code = 24


class CheckpointLearner(LaneRefusal):
    """A checkpoint written by another learner (or lane)."""

    name = "checkpoint-learner"
    exit_code = 25


class RemoteDigest(LaneRefusal):
    """A file on a node does not hash to the SHA-256 of what the driver built (or sent) there."""

    name = "remote-digest"
    exit_code = 26


class HostKeyUnknown(LaneRefusal):
    """A node's host key is not in the known_hosts the config names (or the user's): never accepted."""

    name = "host-key-unknown"
    exit_code = 27


class HostKeyChanged(LaneRefusal):
    """A node presents another host key than the one known_hosts holds for it: never accepted."""

    name = "host-key-changed"
    exit_code = 28


class NodeUnreachable(LaneRefusal):
    """A node cannot be reached over SSH (or the connection to it was lost)."""

    name = "node-unreachable"
    exit_code = 29


class LaneConfig(LaneRefusal):
    """The lane config cannot be read, or is not valid (the preflight, before anything is asked of a device)."""

    name = "lane-config"
    exit_code = 30


class MinorMissing(LaneRefusal):
    """A role's bound minor selects no GPU on its host (the preflight's query of the devices)."""

    name = "minor-missing"
    exit_code = 31


class MinorBoundTwice(LaneRefusal):
    """Two roles bind one minor of one host: one GPU cannot be two roles' (the preflight, before any query)."""

    name = "minor-bound-twice"
    exit_code = 32


EXIT_CODES: dict[str, int] = {
    cls.name: cls.exit_code
    for cls in (
        DeviceUuid,
        NvidiaPlanHost,
        CheckpointChunk,
        PeerIdentity,
        CheckpointEpoch,
        CheckpointLearner,
        RemoteDigest,
        HostKeyUnknown,
        HostKeyChanged,
        NodeUnreachable,
        LaneConfig,
        MinorMissing,
        MinorBoundTwice,
    )
}
