"""A one-role lane on the recorder's own machine, recorded by ``alpha observe gate observed-worker``.

The worker (../one-gpu-h200-ssh/worker.py: 2 GiB held on cuda:0, the GPU kept busy) is captured, bound by
a preflight naming GPU 0 as NVML gives it (the lane's own claim: the gate compares it with what the recorder
observed), and run as step ``uninterrupted-run``. Usage: ``python3 lane.py OUT SECONDS``.
"""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def alpha(*args: str) -> str:
    return subprocess.run(["alpha", "observe", *args], check=True, capture_output=True, text=True).stdout


out = Path(sys.argv[1])
seconds = sys.argv[2] if len(sys.argv) > 2 else "6"
out.mkdir(parents=True, exist_ok=True)
exe = out / "worker.py"
exe.write_bytes((HERE.parent / "one-gpu-h200-ssh" / "worker.py").read_bytes())
digest = hashlib.sha256(exe.read_bytes()).hexdigest()
alpha("step", "static-build", "--", "true")
alpha("artifact", str(exe))
alpha("receipt", "static-build", "--status", "pass", "--field", "role=worker", "--field", f"target={exe}")
alpha(
    "receipt",
    "build",
    "--status",
    "pass",
    "--json",
    json.dumps({"role": "worker", "target": str(exe), "sha256_local": digest, "sha256_remote": digest}),
)
query = "nvidia-smi --query-gpu=index,uuid,name,driver_version --format=csv,noheader"
text = alpha("step", "preflight", "--", "sh", "-c", query)
rows = [tuple(c.strip() for c in line.split(",")) for line in text.splitlines() if line.strip()]
gpu = next(r for r in rows if str(r[0]) == "0")
gpus = [{"minor": 0, "uuid": gpu[1], "product": gpu[2], "driver": gpu[3]}]
alpha("receipt", "preflight", "--status", "pass", "--json", json.dumps({"gpus": gpus, "compute_processes": []}))
run = alpha("step", "uninterrupted-run", "--", sys.executable, str(exe), seconds)
print(run, end="")
