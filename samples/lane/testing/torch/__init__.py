"""A fake torch for CPU tests of the GPU code path (test double only).

It models 0-d float64 "CUDA" tensors as Python floats (so results equal real
binary64 arithmetic) and refuses to mix a tensor with a Python scalar, the
rule the learner must keep on real CUDA (see lanekit/numeric.py).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gpus import gpus

sys.path.pop(0)

__version__ = "0.0-fake"
float64 = "float64"


class _Version:
    cuda = "fake"


version = _Version()


class device:
    def __init__(self, kind: str, index: int = 0) -> None:
        self.type = kind
        self.index = index


class Tensor:
    def __init__(self, value: float, dtype: str, dev: device) -> None:
        self.value = float(value)
        self.dtype = dtype
        self.is_cuda = dev.type == "cuda"

    def dim(self) -> int:
        return 0

    def item(self) -> float:
        return self.value

    def _op(self, other: object, fn) -> Tensor:  # type: ignore[no-untyped-def]
        if not isinstance(other, Tensor):
            raise TypeError("fake torch: a tensor met a Python scalar")
        return Tensor(fn(self.value, other.value), self.dtype, device("cuda"))

    def __add__(self, o: object) -> Tensor:
        return self._op(o, lambda a, b: a + b)

    def __sub__(self, o: object) -> Tensor:
        return self._op(o, lambda a, b: a - b)

    def __mul__(self, o: object) -> Tensor:
        return self._op(o, lambda a, b: a * b)

    def __truediv__(self, o: object) -> Tensor:
        return self._op(o, lambda a, b: a / b)


def tensor(value: float, dtype: str, device: device) -> Tensor:
    return Tensor(value, dtype, device)


class cuda:
    @staticmethod
    def _visible() -> list[dict[str, object]]:
        wanted = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        return [g for g in gpus() if g["uuid"] == wanted]

    @staticmethod
    def is_available() -> bool:
        return bool(cuda._visible())

    @staticmethod
    def device_count() -> int:
        return len(cuda._visible())

    @staticmethod
    def get_device_name(dev: object = None) -> str:
        return str(cuda._visible()[0]["product"])
