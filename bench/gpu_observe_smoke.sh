#!/usr/bin/env bash
# Smoke test of the recorder's device observation on a real GPU machine (NVML, torch).
#
#   bash bench/gpu_observe_smoke.sh [OUT_DIR]        # default: $OUT, else ./gpu-smoke
#
# It records, under `alpha observe record --observe-devices nvml --sample-interval 0.2`,
# a step "train" that runs a torch process allocating ~2 GiB on cuda:0 and multiplying
# matrices there for ~4 s, then prints:
#   - every device.observed event (`alpha observe read --kind device.observed --json`);
#   - a summary: observer, driver, CUDA driver, NVML library path and SHA-256, the GPUs,
#     each GPU process seen (pid, GPU, in_tree, steps, argv) and the attribution;
#   - the highest utilisation and memory in use telemetry saw on each GPU;
#   - the sampler's cost: the recorder's CPU time over a `sleep 10` recording with the
#     sampler at the default 1 s interval and without it (--observe-devices off).
# It exits 1 unless the observer is nvml and a process of the recorded tree was seen on
# the GPU the worker used, inside step "train".
#
# Needs: python3 with torch (the GPU machine's image has it, with nvidia-ml-py, psutil,
# pyarrow and click). `alpha` on PATH is used when there is one; otherwise this checkout
# is put on PYTHONPATH, and the packages the image lacks must be installed first, e.g. as
# wheels carried to the machine: zstandard, blake3, structlog, cryptography, jsonschema
# (and jsonschema's own needs: attrs, referencing, rpds-py, jsonschema-specifications).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-${OUT:-$PWD/gpu-smoke}}
mkdir -p "$DIR"
if command -v alpha >/dev/null 2>&1; then
    ALPHA=(alpha)
else
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
    ALPHA=(python3 -c 'import sys; sys.argv[0] = "alpha"; from observe.cli.root import main; main()')
fi
GPU=${GPU:-0}

cat > "$DIR/worker.py" <<'EOF'
import os, sys, time
import torch

gpu = int(sys.argv[1])
dev = torch.device(f"cuda:{gpu}")
block = torch.empty(2 << 30, dtype=torch.uint8, device=dev)  # ~2 GiB held for the whole run
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
deadline = time.monotonic() + 4.0
n = 0
while time.monotonic() < deadline:
    b = a @ a
    n += 1
torch.cuda.synchronize(dev)
print(f"worker pid {os.getpid()} on cuda:{gpu}: {n} products, {block.numel() >> 20} MiB held", flush=True)
EOF

STREAM="$DIR/gpu-smoke.aos"
rm -f "$STREAM"
echo "== recording (observer nvml, sample interval 0.2 s)"
"${ALPHA[@]}" observe record --out "$STREAM" --observe-devices nvml --sample-interval 0.2 -- \
    "${ALPHA[@]}" observe step train -- python3 "$DIR/worker.py" "$GPU"
"${ALPHA[@]}" observe verify "$STREAM"

echo "== device.observed events"
"${ALPHA[@]}" observe read "$STREAM" --kind device.observed --json | tee "$DIR/device-observed.jsonl"
"${ALPHA[@]}" observe read "$STREAM" --kind telemetry --json > "$DIR/telemetry.jsonl"

echo "== summary"
status=0
if python3 - "$DIR/device-observed.jsonl" "$DIR/telemetry.jsonl" "$GPU" <<'EOF'
import json, sys

observed = [json.loads(line)["attrs"] for line in open(sys.argv[1])]
telemetry = [json.loads(line)["attrs"] for line in open(sys.argv[2])]
gpu_index = int(sys.argv[3])
start = observed[0]
print("phases:", [o["phase"] for o in observed])
print("observer:", start["observer"], "| driver:", start["driver"], "| cuda_driver:", start["cuda_driver"])
print("library:", start["library"])
print("error(s):", sorted({o["error"] for o in observed if o["error"]}) or None)
for g in start["gpus"]:
    print(f"GPU {g['index']} (minor {g['minor']}): {g['name']} {g['uuid']} {g['memory'] >> 20} MiB, pci {g['pci_bus_id']}")
print("attribution:", sorted({o["attribution"] for o in observed}))
seen = {}
for o in observed:
    for p in o["processes"]:
        seen.setdefault((p["pid"], p["gpu"]), p)
for (pid, gpu), p in sorted(seen.items()):
    print(f"process {pid} on {gpu}: in_tree={p['in_tree']} steps={p['steps']} used={p['used_memory']} argv={p['argv']}")
peak = {}
for t in telemetry:
    for g in t["gpus"]:
        u, m = peak.get(g["uuid"], (0, 0))
        peak[g["uuid"]] = (max(u, g["utilization"] or 0), max(m, g["memory_used"] or 0))
for uuid, (u, m) in peak.items():
    print(f"telemetry peak on {uuid}: utilization {u}%, memory used {m >> 20} MiB")
print("telemetry samples:", len(telemetry), "| max tree processes:", max((t["tree"]["processes"] for t in telemetry), default=0))
target = next((g["uuid"] for g in start["gpus"] if g["index"] == gpu_index), None)
ok = start["observer"] == "nvml" and any(
    p["in_tree"] and p["gpu"] == target and "train" in p["steps"] for p in seen.values()
)
if not ok and "unavailable" in {o["attribution"] for o in observed}:
    print("NVML could not attribute processes here; judge by the telemetry peaks above")
print("SMOKE", "OK" if ok else "FAILED: no process of the recorded tree seen on GPU", gpu_index, "in step train")
sys.exit(0 if ok else 1)
EOF
then :; else status=1; fi

echo "== sampler cost (recorder CPU over record -- sleep 10)"
python3 - "${ALPHA[@]}" <<'EOF'
import resource, subprocess, sys, tempfile, os
alpha = sys.argv[1:]
with tempfile.TemporaryDirectory() as tmp:
    cpu = {}
    for mode in ("auto", "off"):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([*alpha, "observe", "record", "--quiet", "--out", os.path.join(tmp, mode + ".aos"),
                        "--observe-devices", mode, "--", "sleep", "10"], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu[mode] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
print(f"recorder CPU: {cpu['auto']:.3f} s with the sampler (1 s interval), {cpu['off']:.3f} s without:"
      f" {(cpu['auto'] - cpu['off']) / 10 * 100:.3f}% of a core")
EOF
exit $status
