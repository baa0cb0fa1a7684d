"""The role's executable: holds 2 GiB on cuda:0 and keeps the GPU busy for a few seconds (torch), else sleeps.

It holds its own file open, so the recorder's observer can tell which script this interpreter runs by the
SHA-256 of that file (read through the descriptor), never by its argv.
"""

import sys
import time

HELD = open(__file__, "rb")  # noqa: SIM115 - held for the process's life: its identity on the node
SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 6.0
try:
    import torch

    torch.ones  # noqa: B018 - the lane's CPU test double of torch has no tensors of this kind
except (ImportError, AttributeError):  # a dry run without a GPU: nothing to hold; the observer sees no GPU work
    time.sleep(SECONDS)
    print("worker: no torch with CUDA, slept", SECONDS)
    sys.exit(0)
x = torch.ones(2 << 30, dtype=torch.uint8, device="cuda:0")
end = time.monotonic() + SECONDS
total = 0
while time.monotonic() < end:
    total = int(x.sum().item())
print("worker on", torch.cuda.get_device_name(0), "sum", total)
