#!/bin/bash
# The one device call of issue 35 (GPU health as evidence), on one lent H200:
#   (1) nvidia-smi -q, for comparison with what NVML gave the recorder;
#   (2) the sampler's cost per sample with the health facts and events against without them (today's),
#       interleaved in one process (bench/bench_sampler.py, sampler only);
#   (3) a recording: observed-worker (../one-gpu-h200-ssh/gate.toml) over lane.py on cuda:0, sampled every
#       0.5 s, with its sealed verdict and the health facts it carries (health.py).
#
#   bash device.sh OUT      (from anywhere; PYTHONPATH: the carried wheels and this checkout)
#
# DRY=1: the rehearsal on a machine without a GPU (the simulated observer; a verdict that cannot be physical).
# WORK=DIR: where its scratch goes (default /tmp); SAMPLES, SECONDS_RUN: the bench's samples, the worker's seconds.
set -u
out=$1
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
bin=${WORK:-/tmp}/aos-bin
mkdir -p "$bin"
printf '#!/bin/sh\nexec %s -c "import sys; from observe.cli.entry import main; sys.argv[0] = \\"alpha\\"; main()" "$@"\n' \
    "$(command -v python3)" >"$bin/alpha"
chmod +x "$bin/alpha"
export PATH="$bin:$PATH" PYTHONUNBUFFERED=1
cd "$repo" || exit 1
work=${WORK:-/tmp}/gpu-health
rm -rf "$work" && mkdir -p "$work"
echo "== machine"
uname -r; python3 --version; nvidia-smi -L; python3 -c 'import pynvml, sys; print("nvidia-ml-py", pynvml.__file__)'
if [ -n "${DRY:-}" ]; then
    mkdir -p "$work/bin"
    printf '#!/bin/sh\necho "0, GPU-dry-0000, NVIDIA H200, 580.159.04"\n' >"$work/bin/nvidia-smi"
    chmod +x "$work/bin/nvidia-smi"
    export PATH="$work/bin:$PATH"
    python3 - "$work/gpus.json" <<'PY'
import json, sys
health = {"serial": "dry", "ecc_mode": "enabled", "ecc_volatile_uncorrected": 0, "remap_pending": False,
          "events": ["xid"], "unsupported": {"retired_pages_pending": 3}}
gpu = {"index": 0, "minor": 0, "uuid": "GPU-dry-0000", "name": "NVIDIA H200", "memory": 150 << 30, "health": health}
doc = {"driver": "580.159.04", "gpus": [gpu],
       "processes": [{"gpu": "GPU-dry-0000", "pid": "tree", "argv_contains": "worker.py", "used_memory": 2 << 30}]}
json.dump(doc, open(sys.argv[1], "w"))
PY
    export ALPHA_OBSERVE_SIMULATED_GPUS="$work/gpus.json"
fi
echo "== (1) nvidia-smi -q"
nvidia-smi -q >"$out/nvidia-smi-q.txt" 2>&1
grep -E "Serial Number|VBIOS Version|Board Part Number|Persistence Mode|Current *:|Max *:|Link Width|Volatile|Aggregate|Remapped|Pending|Failure|Retired" \
    "$out/nvidia-smi-q.txt" | head -60
echo "== (2) the sampler's cost per sample, health facts on and off"
ALPHA_BENCH_SAMPLER_ONLY=1 ALPHA_BENCH_SAMPLES="${SAMPLES:-300}" python3 bench/bench_sampler.py 2>&1
echo "== (3) observed-worker over lane.py on cuda:0"
echo '{"host": "local", "minors": [0]}' >"$work/lane-config.json"
ALPHA_PARTITIONED_DEVICE_CONFIG="$work/lane-config.json" alpha observe gate observed-worker \
    --gate-file "$here/../one-gpu-h200-ssh/gate.toml" --sample-interval 0.5 --out "$out/worker.aos" \
    -- python3 "$here/lane.py" "$work/lane" "${SECONDS_RUN:-8}"
echo "gate exit $?"
alpha observe verdict "$out/worker.aos" --json >"$out/worker.verdict.json"
echo "verdict exit $?"
python3 -c 'import json, sys; v = json.load(open(sys.argv[1])); print(v["verdict"], v["scope"]); [print(" ", c["name"], c["status"], c["reason"][:400]) for c in v["checks"]]' "$out/worker.verdict.json"
echo "== the health the recording carries"
python3 "$here/health.py" "$out/worker.aos"
echo "== done"
