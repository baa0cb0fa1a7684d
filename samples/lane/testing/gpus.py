"""Test doubles' shared view of the fake GPUs (never used on a real machine).

``FAKE_GPUS`` (JSON list of {minor, uuid, product, driver}) names the cards;
by default two distinct fake RTX 3090s on a 580 driver.

``python3 gpus.py --simulated`` prints the same cards as a file for the
recorder's simulated observer (``ALPHA_OBSERVE_SIMULATED_GPUS=FILE``). The
recorder records them as observer ``simulated``, which never gives scope
physical: a fake card stays a fake card, whatever the file says of itself.
"""

from __future__ import annotations

import json
import os

DEFAULT = [
    {
        "minor": 0,
        "uuid": "GPU-fa4e0000-0000-4000-8000-000000000000",
        "product": "NVIDIA GeForce RTX 3090",
        "driver": "580.65.06",
    },
    {
        "minor": 1,
        "uuid": "GPU-fa4e0000-0000-4000-8000-000000000001",
        "product": "NVIDIA GeForce RTX 3090",
        "driver": "580.65.06",
    },
]


def gpus() -> list[dict[str, object]]:
    """The fake cards."""
    text = os.environ.get("FAKE_GPUS")
    return json.loads(text) if text else DEFAULT


def simulated(claim_nvml: bool = False) -> dict[str, object]:
    """The fake cards as an ``ALPHA_OBSERVE_SIMULATED_GPUS`` file (``claim_nvml``: a forged one naming NVML)."""
    cards = gpus()
    doc: dict[str, object] = {
        "driver": str(cards[0]["driver"]) if cards else None,
        "gpus": [
            {"index": g["minor"], "minor": g["minor"], "uuid": g["uuid"], "name": g["product"], "memory": 24 << 30}
            for g in cards
        ],
    }
    if claim_nvml:
        doc["observer"] = "nvml"
    return doc


if __name__ == "__main__":
    import sys

    if sys.argv[1:] not in (["--simulated"], ["--simulated", "--claim-nvml"]):
        sys.exit("usage: gpus.py --simulated [--claim-nvml]")
    print(json.dumps(simulated("--claim-nvml" in sys.argv), indent=1))
