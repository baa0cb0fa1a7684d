#!/usr/bin/env bash
# The physical qualification on two GPUs of one machine, with its role swap and
# negative controls (issue 15), every run recorded with device observation on.
#
#   bash samples/lane/two_gpu_run.sh OUT        (from the repository root)
#
# Needs: nvidia-smi and two NVIDIA GPUs, python3 with torch (CUDA) and
# alpha-observe installed. Writes under OUT:
#   lane-config.json, lane-config-swapped.json   minors [0, 1] and [1, 0]
#   forward/NAME.aos      the three lanes, roles on minors [0, 1]    expected: pass, physical
#   swapped/NAME.aos      the three lanes, roles on minors [1, 0]    expected: pass, physical
#   control-visible-swap/coordinate-device.aos  owner-0 bound to GPU 0 but run on GPU 1
#                         behind the binding's back (LANEKIT_FAULT_VISIBLE_SWAP): expected not a pass
#   control-busy/coordinate-device.aos  another compute process holds GPU 1 from before
#                         the preflight: expected inconclusive
#   *.verdict.json        `alpha observe verdict --json` of each stream
#   machine.txt           nvidia-smi, driver, torch and CUDA versions
# Exit 0 when every verdict came out as expected, 1 otherwise.
set -u
OUT=${1:?usage: two_gpu_run.sh OUT}
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
INTERVAL=${ALPHA_TWO_GPU_SAMPLE_INTERVAL:-0.2}

mapfile -t rows < <(nvidia-smi --query-gpu=index,uuid,name,driver_version --format=csv,noheader)
[ "${#rows[@]}" -ge 2 ] || { echo "two_gpu_run: needs two GPUs, nvidia-smi lists ${#rows[@]}" >&2; exit 1; }
uuid0=$(echo "${rows[0]}" | awk -F', *' '{print $2}')
uuid1=$(echo "${rows[1]}" | awk -F', *' '{print $2}')
product=$(echo "${rows[0]}" | awk -F', *' '{print $3}')
driver=$(echo "${rows[0]}" | awk -F', *' '{print $4}')
{
    nvidia-smi --query-gpu=index,uuid,name,driver_version,pci.bus_id,memory.total --format=csv
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())'
    python3 -c 'import pynvml; print("nvidia-ml-py", pynvml.__version__ if hasattr(pynvml, "__version__") else "?")' 2>&1
    alpha --version
    uname -r
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

write_config() {  # write_config FILE MINOR0 MINOR1
    PRODUCT="$product" RELEASE="${driver%%.*}" REMOTE="$OUT/remote" python3 - "$1" "$2" "$3" <<'PY'
import json, os, sys
config = {
    "owner": "alpha-observe-two-gpu",
    "pod_ids": ["lent-machine"],
    "host": "local",
    "minors": [int(sys.argv[2]), int(sys.argv[3])],
    "remote_root": os.environ["REMOTE"],
    "transport": "loopback",
    "products": sorted({os.environ["PRODUCT"], "NVIDIA GeForce RTX 3070", "NVIDIA GeForce RTX 3090"}),
    "driver": sorted({os.environ["RELEASE"], "580"}),
}
with open(sys.argv[1], "w") as fh:
    json.dump(config, fh, indent=2)
    fh.write("\n")
PY
}
write_config "$OUT/lane-config.json" 0 1
write_config "$OUT/lane-config-swapped.json" 1 0

variable_of() {
    case $1 in
        distributed-device) echo ALPHA_PARTITIONED_DEVICE_CONFIG ;;
        coordinate-device) echo ALPHA_COORDINATE_DEVICE_CONFIG ;;
        independent-device) echo ALPHA_INDEPENDENT_DEVICE_CONFIG ;;
    esac
}

status=0
run() {  # run RUN GATE CONFIG EXPECTED_EXIT [ENV=VALUE...]
    local name=$1 gate=$2 config=$3 expected=$4
    shift 4
    local dir="$OUT/$name"
    mkdir -p "$dir"
    rm -rf "${dir:?}/$gate" "$dir/$gate.aos"
    env "$@" "$(variable_of "$gate")=$config" alpha observe gate "$gate" --sample-interval "$INTERVAL" \
        --out "$dir/$gate.aos" -- bash scripts/ci/"$gate".sh "$dir/$gate"
    local rc=$?
    alpha observe verdict "$dir/$gate.aos" --json >"$dir/$gate.verdict.json"
    echo "two_gpu_run: $name $gate exited $rc (expected $expected)"
    case $expected in
        nonzero) [ "$rc" -ne 0 ] || status=1 ;;
        *) [ "$rc" -eq "$expected" ] || status=1 ;;
    esac
}

for gate in distributed-device coordinate-device independent-device; do
    run forward "$gate" "$OUT/lane-config.json" 0
done
for gate in distributed-device coordinate-device independent-device; do
    run swapped "$gate" "$OUT/lane-config-swapped.json" 0
done
run control-visible-swap coordinate-device "$OUT/lane-config.json" nonzero "LANEKIT_FAULT_VISIBLE_SWAP=$uuid0=$uuid1"

# Another compute process on GPU 1, started before the preflight and outside the recording.
python3 - "$OUT/busy.ready" <<'PY' &
import sys, time, torch
x = torch.ones(256 << 20, device="cuda:1")  # 1 GiB held on GPU 1
open(sys.argv[1], "w").write("ready\n")
deadline = time.time() + 600
while time.time() < deadline:
    x.mul_(1.0)
    torch.cuda.synchronize()
    time.sleep(0.05)
PY
busy=$!
for _ in $(seq 1 600); do [ -f "$OUT/busy.ready" ] && break; sleep 0.1; done
run control-busy coordinate-device "$OUT/lane-config.json" 3
kill "$busy" 2>/dev/null
wait "$busy" 2>/dev/null
echo "two_gpu_run: status $status"
exit $status
