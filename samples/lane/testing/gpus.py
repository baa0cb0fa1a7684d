"""Test doubles' shared view of the fake GPUs (never used on a real machine).

``FAKE_GPUS`` (JSON list of {minor, uuid, product, driver}) names the cards;
by default two distinct fake RTX 3090s on a 580 driver.
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
