#!/usr/bin/env bash
# The three lanes' physical phases run directly, without a recorder (no alpha
# needed): a quick check of the GPU code path on a machine with one GPU.
#
#   bash samples/lane/direct_smoke.sh OUT        (from the repository root)
#
# Binds both roles to GPU 0 and prints one line per receipt (name, status);
# receipts are not recorded, so this proves nothing to a gate: use
# physical_smoke.sh for evidence. Exit 0 when every receipt but the preflight
# (inconclusive with one GPU) passed.
set -u
OUT=${1:?usage: direct_smoke.sh OUT}
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
export PYTHONPATH="$(cd "$(dirname "$0")" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
row=$(nvidia-smi --query-gpu=index,uuid,name,driver_version --format=csv,noheader | awk -F', *' '$1 == 0')
product=$(echo "$row" | awk -F', *' '{print $3}')
driver=$(echo "$row" | awk -F', *' '{print $4}')
cat > "$OUT/config.json" <<JSON
{"owner": "direct-smoke", "pod_ids": ["local"], "host": "local",
 "minors": [0, 0], "remote_root": "$OUT/remote", "transport": "loopback",
 "products": ["$product"], "driver": ["${driver%%.*}"]}
JSON
unset AOS_RECEIPTS
status=0
for lane in partitioned coordinates independent; do
    for phase in static-build static-check preflight build refusal-wrong-uuid refusal-wrong-product \
                 uninterrupted-run split-run host-shadow-control fresh-evaluation corrupted-checkpoint qualification; do
        [ "$lane" = partitioned ] && [ "$phase" = host-shadow-control ] && continue
        python3 -m lanekit "$phase" "$lane" "$OUT/$lane" "$OUT/config.json" 2>"$OUT/$lane.$phase.err" >"$OUT/$lane.$phase.out"
        rc=$?
        grep -h '^refused: \|^error\|Traceback' "$OUT/$lane.$phase.err" | sed "s/^/    /"
        python3 - "$OUT/$lane.$phase.err" "$lane" "$phase" "$rc" <<'PY' || status=1
import json, sys
path, lane, phase, rc = sys.argv[1:]
bad = False
for line in open(path):
    if line.startswith("receipt (not recording): "):
        r = json.loads(line.split(": ", 1)[1])
        f = r["fields"]
        extra = {k: f[k] for k in ("device", "exit_name", "oracle", "findings", "state") if k in f}
        print(f"{lane:12} {phase:22} rc={rc:3} {r['name']:20} {r['status']:12} {json.dumps(extra)[:200]}")
        bad |= r["status"] not in ("pass",) and not (r["name"] == "preflight" and r["status"] == "inconclusive")
sys.exit(1 if bad else 0)
PY
    done
done
exit $status
