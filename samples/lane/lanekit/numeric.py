"""Where the learner's state lives: host binary64 floats, or float64 CUDA tensors.

Both backends expose the same four element-wise operations through Python's
operators (``+ - * /`` on two values of the backend), so the learner's code is
one text evaluated in one order on either. On CUDA every value, constants
included, is a 0-d float64 tensor on the bound device: no Python scalar ever
meets a tensor (torch turns ``t / 3.0`` into a multiply by a reciprocal), no
reduction or fused kernel is used, so each operation is one IEEE-754 binary64
operation, rounded to nearest, exactly as on the host.

torch is imported only by :class:`CudaBackend`, i.e. only on the physical path.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from .refusals import DeviceUuid, NvidiaPlanHost

__all__ = ["Backend", "CudaBackend", "HostBackend", "backend_for"]


class Backend(Protocol):
    """The minimal interface the learner needs from a place that holds state."""

    kind: str

    def const(self, value: float) -> Any:
        """A value of this backend holding ``value`` exactly."""

    def read(self, value: Any) -> float:
        """Copy one value back to a host float (exact)."""

    def resident(self, value: Any) -> bool:
        """True when ``value`` lives where this backend keeps state."""

    def describe(self) -> dict[str, object]:
        """Where the state lives, for the run's membership record."""


class HostBackend:
    """State as Python floats (IEEE-754 binary64 on every CPython)."""

    kind = "host"

    def const(self, value: float) -> float:
        return float(value)

    def read(self, value: Any) -> float:
        return float(value)

    def resident(self, value: Any) -> bool:
        return type(value) is float

    def describe(self) -> dict[str, object]:
        return {"kind": "host", "dtype": "binary64"}


#: A negative control only (samples/lane/two_gpu_run.sh): ``BOUND=OTHER`` makes a role bound
#: to GPU ``BOUND`` run on GPU ``OTHER`` behind its binding's back, as a stray
#: ``CUDA_VISIBLE_DEVICES`` would. The lane cannot tell; the recorder's device observation can.
FAULT_VISIBLE_SWAP = "LANEKIT_FAULT_VISIBLE_SWAP"


def _visible(uuid: str) -> str:
    bound, sep, other = os.environ.get(FAULT_VISIBLE_SWAP, "").partition("=")
    return other if sep and bound == uuid and other else uuid


class CudaBackend:
    """State as 0-d torch float64 tensors on the one GPU named by ``uuid``."""

    kind = "gpu"

    def __init__(self, uuid: str, product: str) -> None:
        # Make the bound card the only one this process can see, before torch loads.
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        os.environ["CUDA_VISIBLE_DEVICES"] = _visible(uuid)
        import torch  # type: ignore[import-not-found]  # lazily: only the physical path has (or needs) torch

        if not torch.cuda.is_available() or torch.cuda.device_count() != 1:
            raise DeviceUuid(f"CUDA does not expose exactly the bound device {uuid}")
        self.torch = torch
        self.device = torch.device("cuda", 0)
        self.uuid = uuid
        self.product = torch.cuda.get_device_name(self.device)
        if self.product != product:
            raise NvidiaPlanHost(f"CUDA reports {self.product!r}, the role was built for {product!r}")
        self.dtype = torch.float64

    def const(self, value: float) -> Any:
        return self.torch.tensor(float(value), dtype=self.dtype, device=self.device)

    def read(self, value: Any) -> float:
        return float(value.item())

    def resident(self, value: Any) -> bool:
        t = self.torch
        return isinstance(value, t.Tensor) and value.is_cuda and value.dtype == self.dtype and value.dim() == 0

    def describe(self) -> dict[str, object]:
        return {
            "kind": "gpu",
            "dtype": "float64",
            "uuid": self.uuid,
            "product": self.product,
            "torch": str(self.torch.__version__),
            "cuda": str(self.torch.version.cuda),
        }


def backend_for(binding: dict[str, object]) -> Backend:
    """The backend a role's binding asks for (checked against the device first)."""
    if binding.get("kind") == "gpu":
        return CudaBackend(str(binding["uuid"]), str(binding["product"]))
    return HostBackend()
