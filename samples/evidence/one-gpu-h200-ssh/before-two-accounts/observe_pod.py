"""Record a worker started over the lane's own SSH on cuda:0 of "node" root@127.0.0.1, observed by the recorder.

Usage: ``python3 observe_pod.py OUT [--simulated]``, from the repository root with ``PYTHONPATH`` on it and
the OpenSSH tools on ``PATH``. It starts a throwaway sshd on 127.0.0.1 (tests/helpers/sshd.py), writes the
lane config naming it, runs ``alpha observe gate observed-worker`` over lane.py, and leaves in OUT the
stream, its HTML report and the observations as JSON lines (and prints the host key's ``ssh-keygen -lf``).
``--simulated``: a dry run on a machine without a GPU (the simulated observer on the node; never physical).
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import tests.helpers.sshd as sshd
from tests.helpers.sshd import make_node

sshd.SSHD = os.environ.get("SSHD", sshd.SSHD)  # a carried sshd (device.sh) where the machine has none

HERE = Path(__file__).resolve().parent
out = Path(sys.argv[1]).resolve()
simulated = "--simulated" in sys.argv
work = Path(tempfile.mkdtemp(prefix="pod-"))
node = make_node(work / "node", "pod")
node.start()
try:
    cfg = work / "lane-config.json"
    cfg.write_text(json.dumps(node.config(owner="device-check", pod_ids=["h200"], minors=[0], transport="loopback")))
    env = {**os.environ, "ALPHA_PARTITIONED_DEVICE_CONFIG": str(cfg), "PYTHONUNBUFFERED": "1"}
    env["LANE_SSH"] = json.dumps(node.ssh_argv())
    env["LANE_ROOT"] = str(node.root)
    env["LANE_PYTHON"] = os.environ.get("LANE_PYTHON", sys.executable)
    if simulated:
        sim = work / "gpus.json"
        gpu = {"index": 0, "minor": 0, "uuid": "GPU-sim-0", "name": "NVIDIA H200", "memory": 150 << 30}
        sim.write_text(
            json.dumps(
                {
                    "driver": "580.0",
                    "gpus": [gpu],
                    "processes": [
                        {"gpu": "GPU-sim-0", "pid": "tree", "argv_contains": "worker.py 6", "used_memory": 2 << 30}
                    ],
                }
            )
        )
        env["ALPHA_OBSERVE_SIMULATED_GPUS"] = str(sim)
        env["LANE_NVIDIA_SMI"] = f"simulated:{sim}"
    else:
        smi = subprocess.run(["sh", "-c", "command -v nvidia-smi"], capture_output=True, text=True).stdout.strip()
        env["LANE_NVIDIA_SMI"] = smi or "nvidia-smi"
    stream = out / "pod.aos"
    gate = subprocess.run(
        [
            "alpha",
            "observe",
            "gate",
            "observed-worker",
            "--gate-file",
            str(HERE / "gate.toml"),
            "--sample-interval",
            "0.5",
            "--out",
            str(stream),
            "--",
            sys.executable,
            str(HERE / "lane.py"),
        ],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=240,
    )
    print("gate exit", gate.returncode)
    print(gate.stdout[-3000:], gate.stderr[-3000:])
    subprocess.run(["alpha", "observe", "report", str(stream), "-o", str(out / "pod.report.html")], check=False)
    read = subprocess.run(["alpha", "observe", "read", "--json", str(stream)], capture_output=True, text=True)
    kept = [
        line
        for line in read.stdout.splitlines()
        if json.loads(line)["kind"] in ("device.observed", "node.lost", "verdict")
    ]
    (out / "pod.observed.jsonl").write_text("\n".join(kept) + "\n")
    keygen = subprocess.run(["ssh-keygen", "-lf", str(node.host_key) + ".pub"], capture_output=True, text=True)
    print("ssh-keygen -lf of the node's host key:", keygen.stdout)
finally:
    node.stop()
