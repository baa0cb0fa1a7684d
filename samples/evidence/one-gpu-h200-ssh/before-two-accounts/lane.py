"""A one-role lane, recorded by ``alpha observe gate``: build, upload (SHA-256 checked on the node), preflight and run.

The node is reached with the lane's own ``ssh`` (``LANE_SSH``: a JSON argv prefix; empty: this machine).
``LANE_ROOT`` is the node's ``remote_root``, ``LANE_PYTHON`` the interpreter that runs the worker there,
``LANE_NVIDIA_SMI`` the node's ``nvidia-smi`` (``simulated:FILE`` on a dry run: the GPUs of that file).
"""

import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SSH = json.loads(os.environ.get("LANE_SSH", "[]"))
ROOT = os.environ["LANE_ROOT"]
PYTHON = os.environ.get("LANE_PYTHON", "python3")
SMI = os.environ.get("LANE_NVIDIA_SMI", "nvidia-smi")


def on_node(command: str) -> list[str]:
    return [*SSH, command] if SSH else ["sh", "-c", command]


def alpha(*args: str) -> str:
    return subprocess.run(["alpha", "observe", *args], check=True, capture_output=True, text=True).stdout


out = Path("out")
out.mkdir(exist_ok=True)
exe = out / "worker.py"
exe.write_bytes((HERE / "worker.py").read_bytes())
digest = hashlib.sha256(exe.read_bytes()).hexdigest()
alpha("step", "static-build", "--", "true")
alpha("artifact", str(exe))
alpha("receipt", "static-build", "--status", "pass", "--field", "role=worker", "--field", f"target={exe}")

remote = f"{ROOT}/worker.py"
with exe.open("rb") as f:
    subprocess.run(on_node(f"cat > {shlex.quote(remote)}"), stdin=f, check=True)
there = alpha("step", "build", "--", *on_node(f"sha256sum {shlex.quote(remote)}")).split()[0]
alpha(
    "receipt",
    "build",
    "--status",
    "pass" if there == digest else "fail",
    "--json",
    json.dumps({"role": "worker", "target": str(exe), "sha256_local": digest, "sha256_remote": there}),
)

if SMI.startswith("simulated:"):
    sim = json.loads(Path(SMI.split(":", 1)[1]).read_text())
    rows = [(g["index"], g["uuid"], g["name"], sim["driver"]) for g in sim["gpus"]]
else:
    query = f"{SMI} --query-gpu=index,uuid,name,driver_version --format=csv,noheader"
    text = alpha("step", "preflight", "--", *on_node(query))
    rows = [tuple(c.strip() for c in line.split(",")) for line in text.splitlines() if line.strip()]
gpu = next(r for r in rows if str(r[0]) == "0")
gpus = [{"minor": 0, "uuid": gpu[1], "product": gpu[2], "driver": gpu[3]}]
alpha("receipt", "preflight", "--status", "pass", "--json", json.dumps({"gpus": gpus, "compute_processes": []}))

print(alpha("step", "uninterrupted-run", "--", *on_node(f"exec {PYTHON} {shlex.quote(remote)} 6")), end="")
sys.exit(0)
