#!/usr/bin/env bash
# A small device lane in the shape of docs/GATES.md ("Lane receipts"), for the
# end-to-end gate tests. Usage: device_lane.sh OUT (run under `alpha observe gate`
# with `--artifact OUT`). LANE_GATE picks the lane (default distributed-device);
# MUTANT names the one thing this run gets wrong (empty: a right lane).
# Each phase runs as `alpha observe step NAME -- device_lane.sh --phase NAME OUT`
# and appends its receipt to the step's own $AOS_RECEIPTS.
set -u
GATE=${LANE_GATE:-distributed-device}
MUTANT=${MUTANT:-}
ROLES="alpha beta"

sha() { sha256sum "$1" | cut -d' ' -f1; }
oracle() { # oracle checkpoint|trajectory FILE: the reference lane's oracle result for this gate (what a right lane publishes)
    python3 -c 'import sys; from gates.oracle_results import ORACLE_CHECKPOINT as C, ORACLE_TRAJECTORY as T
sys.stdout.buffer.write((C if sys.argv[1] == "checkpoint" else T)[sys.argv[2]])' "$1" "$GATE" >"$2"
}
receipt() { printf '{"name":"%s","status":"%s","fields":%s}\n' "$1" "$2" "$3" >>"$AOS_RECEIPTS"; }
role() { # a stand-in role: refuses with NAME (exit 3) when given one, else succeeds
    if [ -n "$1" ]; then echo "refused: $1: this binding does not match the device" >&2; return 3; fi
    return 0
}

phase() {
    local name=$1 OUT=$2
    case $name in
    static-build)
        mkdir -p "$OUT/static"
        for r in $ROLES; do
            printf 'static binary %s\n' "$r" >"$OUT/static/$r"
            receipt static-build pass "{\"role\":\"$r\",\"target\":\"$OUT/static/$r\",\"sha256\":\"$(sha "$OUT/static/$r")\"}"
        done ;;
    static-check)
        for r in $ROLES; do
            result=fail
            grep -q '^static binary' "$OUT/static/$r" && result=pass
            receipt static-check "$result" "{\"role\":\"$r\",\"check\":\"header\",\"result\":\"$result\",\"target\":\"$OUT/static/$r\",\"sha256\":\"$(sha "$OUT/static/$r")\"}"
        done ;;
    preflight)
        cp "$CONFIG" "$OUT/lane-config.json"
        gpus='[{"minor":0,"uuid":"GPU-0000","product":"NVIDIA GeForce RTX 3090","driver":"580.95.05"},{"minor":1,"uuid":"GPU-0001","product":"NVIDIA GeForce RTX 3090","driver":"580.95.05"}]'
        printf '{"gpus":%s}\n' "$gpus" >"$OUT/binding.json"
        receipt preflight pass "{\"gpus\":$gpus,\"compute_processes\":[],\"binding\":\"$OUT/binding.json\"}" ;;
    build)
        mkdir -p "$OUT/build"
        for r in $ROLES; do
            printf 'device binary %s\n' "$r" >"$OUT/build/$r"
            s=$(sha "$OUT/build/$r")
            receipt build pass "{\"role\":\"$r\",\"target\":\"$OUT/build/$r\",\"sha256_local\":\"$s\",\"sha256_remote\":\"$s\"}"
        done ;;
    refusal-wrong-uuid | refusal-wrong-product)
        if [ "$name" = refusal-wrong-uuid ]; then control=wrong-uuid expected=device-uuid; else control=wrong-product expected=nvidia-plan-host; fi
        says=$expected
        [ "$MUTANT" = refusal-exits-zero ] && [ "$control" = wrong-uuid ] && says=""
        [ "$MUTANT" = exit-name-not-shown ] && [ "$control" = wrong-uuid ] && says=nvidia-plan-host
        role "$says"
        rc=$?
        receipt refusal-control pass "{\"control\":\"$control\",\"expected\":\"$expected\",\"exit_code\":$rc,\"exit_name\":\"$expected\",\"checkpoint_written\":false,\"output_bytes\":0}"
        return $rc ;;
    uninterrupted-run)
        mkdir -p "$OUT/uninterrupted"
        oracle checkpoint "$OUT/uninterrupted/checkpoint.bin"
        oracle trajectory "$OUT/uninterrupted/trajectory.json"
        receipt uninterrupted-run pass "{\"updates\":5,\"checkpoint\":\"$OUT/uninterrupted/checkpoint.bin\",\"checkpoint_sha256\":\"$(sha "$OUT/uninterrupted/checkpoint.bin")\",\"trajectory\":\"$OUT/uninterrupted/trajectory.json\"}" ;;
    split-run)
        mkdir -p "$OUT/split"
        oracle checkpoint "$OUT/split/checkpoint.bin"
        [ "$MUTANT" = checkpoints-unequal ] && printf 'state after 3+2 updates, diverged\n' >"$OUT/split/checkpoint.bin"
        receipt split-run pass "{\"updates_before\":3,\"updates_after\":2,\"checkpoint\":\"$OUT/split/checkpoint.bin\",\"resumed_checkpoint_sha256\":\"$(sha "$OUT/split/checkpoint.bin")\",\"epoch_before\":1,\"epoch_after\":2}" ;;
    host-shadow-control)
        mkdir -p "$OUT/shadow"
        cp "$OUT/uninterrupted/checkpoint.bin" "$OUT/shadow/checkpoint.bin"
        cp "$OUT/uninterrupted/trajectory.json" "$OUT/shadow/trajectory.json"
        t=$(sha "$OUT/shadow/trajectory.json")
        c=$(sha "$OUT/shadow/checkpoint.bin")
        receipt host-shadow-control pass "{\"trajectory_sha256\":\"$t\",\"shadow_trajectory_sha256\":\"$t\",\"checkpoint_sha256\":\"$c\",\"shadow_checkpoint_sha256\":\"$c\",\"shadow_checkpoint\":\"$OUT/shadow/checkpoint.bin\",\"shadow_trajectory\":\"$OUT/shadow/trajectory.json\"}" ;;
    fresh-evaluation)
        mkdir -p "$OUT/eval"
        printf '{"loss": 0.25}\n' >"$OUT/eval/output.json"
        receipt fresh-evaluation pass "{\"device\":\"gpu\",\"checkpoint\":\"$OUT/split/checkpoint.bin\",\"checkpoint_sha256\":\"$(sha "$OUT/split/checkpoint.bin")\",\"output\":\"$OUT/eval/output.json\"}" ;;
    corrupted-checkpoint)
        role checkpoint-chunk
        rc=$?
        receipt corrupted-checkpoint pass "{\"exit_code\":$rc,\"exit_name\":\"checkpoint-chunk\"}"
        return $rc ;;
    qualification)
        files=$(cd "$OUT" && find . -type f ! -name lane-config.json ! -name qualification.json | sed 's|^\./||' | sort)
        entries=""
        for f in $files; do entries="$entries${entries:+,}{\"path\":\"$f\",\"sha256\":\"$(sha "$OUT/$f")\"}"; done
        printf '{"lane":"%s","files":[%s]}\n' "$GATE" "$entries" >"$OUT/qualification.json"
        [ "$MUTANT" = qualification-hash ] && printf 'changed after it was recorded\n' >>"$OUT/eval/output.json"
        receipt qualification pass "{\"path\":\"$OUT/qualification.json\",\"sha256\":\"$(sha "$OUT/qualification.json")\"}" ;;
    esac
}

if [ "${1:-}" = --phase ]; then
    CONFIG=${CONFIG:-}
    phase "$2" "$3"
    exit $?
fi

OUT=${1:?usage: device_lane.sh OUT}
case $GATE in
distributed-device) VAR=ALPHA_PARTITIONED_DEVICE_CONFIG ;;
coordinate-device) VAR=ALPHA_COORDINATE_DEVICE_CONFIG ;;
*) VAR=ALPHA_INDEPENDENT_DEVICE_CONFIG ;;
esac
export CONFIG="${!VAR:-}"
mkdir -p "$OUT"
run() { alpha observe step "$1" -- "$0" --phase "$1" "$OUT"; }

run static-build || exit 1
run static-check || exit 1
[ -z "$CONFIG" ] && exit 0
[ "$MUTANT" = physical-missing ] && exit 0
run preflight || exit 1
run build || exit 1
run refusal-wrong-uuid
run refusal-wrong-product
run uninterrupted-run || exit 1
if [ "$MUTANT" = died-then-receipts ]; then
    # something outlives the lane and reports after it died
    (sleep 0.5; receipt split-run pass '{"updates_before":3}') &
    kill -KILL $$
fi
[ "$MUTANT" = skip-split ] || run split-run || exit 1
[ "$GATE" = distributed-device ] || run host-shadow-control || exit 1
run fresh-evaluation || exit 1
run corrupted-checkpoint
run qualification || exit 1
exit 0
