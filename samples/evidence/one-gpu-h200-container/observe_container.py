"""Record a local lane inside a private PID namespace while a CUDA process outside it holds memory on the same GPU.

Usage: ``python3 observe_container.py OUT [--simulated]``, from the repository root with ``PYTHONPATH`` on it.
A holder (torch, outside the namespace) takes 6 GiB of cuda:0; then ``unshare --pid --fork --mount-proc`` runs
``alpha observe gate observed-worker --observe-devices nvml`` over the SSH evidence's lane.py with a local lane
config (its worker runs inside, on cuda:0). NVML inside the namespace cannot list the holder: the recorder's
``device.observed`` says namespace ``other`` and shows the GPU's memory that no listed process explains, and the
gate is inconclusive (a shared GPU). ``--simulated``: a dry run without a GPU (the holder is simulated as a
process NVML does not list). OUT gets the stream, its report and the observations as JSON lines.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

LANE = Path(__file__).resolve().parent.parent / "one-gpu-h200-ssh" / "before-two-accounts"
HOLD = (
    "import time, torch\n"
    "x = torch.ones(6 << 30, dtype=torch.uint8, device='cuda:0'); torch.cuda.synchronize()\n"
    "print('holding', torch.cuda.memory_allocated(), flush=True)\n"
    "time.sleep(120)\n"
)
out = Path(sys.argv[1]).resolve()
simulated = "--simulated" in sys.argv
work = Path(tempfile.mkdtemp(prefix="container-"))
(work / "root").mkdir()
cfg = work / "lane-config.json"
cfg.write_text(json.dumps({"owner": "device-check", "host": "local", "minors": [0], "transport": "loopback"}))
env = {**os.environ, "ALPHA_PARTITIONED_DEVICE_CONFIG": str(cfg), "PYTHONUNBUFFERED": "1"}
env |= {"LANE_SSH": "[]", "LANE_ROOT": str(work / "root"), "LANE_PYTHON": sys.executable}
holder = None
if simulated:
    sim = work / "gpus.json"
    gpu = {"index": 0, "minor": 0, "uuid": "GPU-sim-0", "name": "NVIDIA H200", "memory": 150 << 30}
    procs = [
        {"gpu": "GPU-sim-0", "pid": "tree", "argv_contains": "worker.py 6", "used_memory": 1 << 30},
        {"gpu": "GPU-sim-0", "pid": 1, "used_memory": 6 << 30, "listed": False},
    ]
    sim.write_text(json.dumps({"driver": "580.0", "gpus": [gpu], "processes": procs}))
    env |= {"ALPHA_OBSERVE_SIMULATED_GPUS": str(sim), "LANE_NVIDIA_SMI": f"simulated:{sim}"}
else:
    holder = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    print("outside the namespace:", holder.stdout.readline().strip(), "pid", holder.pid)
    smi = subprocess.run(["sh", "-c", "command -v nvidia-smi"], capture_output=True, text=True).stdout.strip()
    env["LANE_NVIDIA_SMI"] = smi or "nvidia-smi"
stream = out / "container.aos"
try:
    gate = subprocess.run(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            "alpha",
            "observe",
            "gate",
            "observed-worker",
            "--gate-file",
            str(LANE / "gate.toml"),
            "--observe-devices",
            "auto" if simulated else "nvml",
            "--sample-interval",
            "0.5",
            "--out",
            str(stream),
            "--",
            sys.executable,
            str(LANE / "lane.py"),
        ],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=240,
    )
    print("unshare + gate exit", gate.returncode)
    print(gate.stdout[-3000:], gate.stderr[-3000:])
finally:
    if holder is not None:
        holder.kill()
if stream.exists():
    subprocess.run(["alpha", "observe", "report", str(stream), "-o", str(out / "container.report.html")], check=False)
    read = subprocess.run(["alpha", "observe", "read", "--json", str(stream)], capture_output=True, text=True)
    kept = [line for line in read.stdout.splitlines() if json.loads(line)["kind"] in ("device.observed", "verdict")]
    (out / "container.observed.jsonl").write_text("\n".join(kept) + "\n")
