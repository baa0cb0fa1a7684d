#!/usr/bin/env bash
# Physical smoke run of the three device lanes on a machine with one NVIDIA GPU.
#
#   bash samples/lane/physical_smoke.sh OUT        (from the repository root)
#
# Writes one lane config binding both roles to GPU 0 (minors [0, 0]), with the
# card's own product and driver release added to the allow-lists, then runs
#   alpha observe gate NAME --out OUT/NAME.aos -- bash scripts/ci/NAME.sh OUT/NAME
# for distributed-device, coordinate-device and independent-device. With one
# GPU the expected verdict of each is `inconclusive` (exit 3), and only because
# the preflight finds that the two UUIDs do not differ; every other check must
# pass. Exit 0 when all three came out that way, 1 otherwise.
# Needs: nvidia-smi, python3 with torch (CUDA), and alpha-observe installed.
set -u
OUT=${1:?usage: physical_smoke.sh OUT}
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)

row=$(nvidia-smi --query-gpu=index,uuid,name,driver_version --format=csv,noheader | awk -F', *' '$1 == 0') || exit 1
[ -n "$row" ] || { echo "physical_smoke: nvidia-smi reports no GPU 0" >&2; exit 1; }
product=$(echo "$row" | awk -F', *' '{print $3}')
driver=$(echo "$row" | awk -F', *' '{print $4}')
release=${driver%%.*}
python3 -c 'import torch; assert torch.cuda.is_available(); print("torch", torch.__version__, "cuda", torch.version.cuda)' \
    || { echo "physical_smoke: python3 cannot use CUDA through torch" >&2; exit 1; }
echo "physical_smoke: GPU 0 is $product, driver $driver"

config="$OUT/lane-config.json"
PRODUCT="$product" RELEASE="$release" REMOTE="$OUT/remote" python3 - "$config" <<'PY'
import json, os, sys
config = {
    "owner": "alpha-observe-physical-smoke",
    "pod_ids": ["lent-machine"],
    "host": "local",
    "minors": [0, 0],
    "remote_root": os.environ["REMOTE"],
    "transport": "loopback",
    "products": sorted({os.environ["PRODUCT"], "NVIDIA GeForce RTX 3070", "NVIDIA GeForce RTX 3090"}),
    "driver": sorted({os.environ["RELEASE"], "580"}),
}
with open(sys.argv[1], "w") as fh:
    json.dump(config, fh, indent=2)
    fh.write("\n")
PY

status=0
for pair in distributed-device:ALPHA_PARTITIONED_DEVICE_CONFIG coordinate-device:ALPHA_COORDINATE_DEVICE_CONFIG \
            independent-device:ALPHA_INDEPENDENT_DEVICE_CONFIG; do
    gate=${pair%%:*}
    variable=${pair#*:}
    rm -rf "${OUT:?}/$gate" "$OUT/$gate.aos"
    env "$variable=$config" alpha observe gate "$gate" --out "$OUT/$gate.aos" -- bash scripts/ci/"$gate".sh "$OUT/$gate"
    rc=$?
    echo "physical_smoke: $gate exited $rc (expected 3, inconclusive: one GPU, so the UUIDs do not differ)"
    [ "$rc" -eq 3 ] || status=1
done
exit $status
