"""A one-role lane, recorded by ``alpha observe gate``: build, upload (SHA-256 checked on the node), preflight and run.

It reaches its node as the lane config says (``ALPHA_PARTITIONED_DEVICE_CONFIG``, one node: ``host``, ``port``,
``ssh_key``, ``known_hosts``, ``remote_root``, ``python``, ``node_env``; read through the project's one reader of
lane configs), with its own ``ssh`` and its own account: never the observer's. The worker runs on the node's
GPU 0 (``cuda:0``). Usage: ``python3 lane.py OUT`` (its files go to OUT).
"""

import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from observe.devices.lane_config import node_entries

HERE = Path(__file__).resolve().parent
with open(os.environ["ALPHA_PARTITIONED_DEVICE_CONFIG"], encoding="utf-8") as fh:
    NODE = node_entries(json.load(fh))[0]
SSH = [
    "ssh",
    "-F",
    "/dev/null",
    "-p",
    str(NODE["port"]),
    "-i",
    NODE["ssh_key"],
    "-o",
    "BatchMode=yes",
    "-o",
    "IdentitiesOnly=yes",
    "-o",
    "StrictHostKeyChecking=yes",
    "-o",
    f"UserKnownHostsFile={NODE['known_hosts']}",
    "-o",
    "GlobalKnownHostsFile=/dev/null",
    NODE["host"],
]
ENV = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted((NODE.get("node_env") or {}).items()))
ROOT = NODE["remote_root"]
PYTHON = NODE.get("python", "python3")


def on_node(command: str) -> list[str]:
    return [*SSH, f"exec env {ENV} sh -c {shlex.quote(command)}"]


def alpha(*args: str) -> str:
    return subprocess.run(["alpha", "observe", *args], check=True, capture_output=True, text=True).stdout


out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
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

query = "nvidia-smi --query-gpu=index,uuid,name,driver_version --format=csv,noheader"
text = alpha("step", "preflight", "--", *on_node(query))
rows = [tuple(c.strip() for c in line.split(",")) for line in text.splitlines() if line.strip()]
gpu = next(r for r in rows if str(r[0]) == "0")
gpus = [{"minor": 0, "uuid": gpu[1], "product": gpu[2], "driver": gpu[3]}]
alpha("receipt", "preflight", "--status", "pass", "--json", json.dumps({"gpus": gpus, "compute_processes": []}))

run = alpha("step", "uninterrupted-run", "--", *on_node(f"exec {shlex.quote(PYTHON)} {shlex.quote(remote)} 6"))
print(run, end="")
sys.exit(0)
