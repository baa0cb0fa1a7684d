#!/usr/bin/env bash
# Shared driver of the three device lanes (sourced by scripts/ci/*-device.sh).
#
#   lane_main LANE CONFIG_VARIABLE OUT
#
# Runs every step of docs/GATES.md "Lane receipts" under `alpha observe step`;
# the work of each step is one phase of samples/lane (python3 -m lanekit PHASE
# LANE OUT [CONFIG]), which captures its files and emits its receipts. The
# static half always runs; the physical half only when CONFIG_VARIABLE names a
# config. The script never changes directory: receipt paths are relative to
# the recording's working directory. Exit 0 when every step did its work
# (including a preflight that leaves the verdict open), 1 otherwise, 2 on usage.
#
# Where the roles run is the config's: host "local" (or none) is this machine;
# any other host is a node over SSH (samples/lane/README.md, "Where the roles
# run"). There each phase starts every role's process as a nested step the
# recorder runs (`alpha observe step PHASE.MEMBER -- ssh ...`); a refusal of the
# driver's (remote-digest 26, host-key-unknown 27, host-key-changed 28,
# node-unreachable 29) stops the physical lane there: no later step runs.
#
# An interrupt (SIGINT, SIGTERM: the operator's Ctrl-C, a CI's cancel, sent on by
# the recorder) stops the lane at once: the step running ends (the recorder sends
# the signal on to it too) and no later step starts; the script exits 130 or 143.

LANE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PYTHONPATH="$LANE_ROOT/samples/lane${PYTHONPATH:+:$PYTHONPATH}"
LANE_PYTHON="${LANE_PYTHON:-python3}"

# Exit codes of the named refusals (samples/lane/lanekit/refusals.py).
REFUSED_DEVICE_UUID=20
REFUSED_NVIDIA_PLAN_HOST=21
REFUSED_CHECKPOINT_CHUNK=22

# The driver's own refusals on a node (lanekit/refusals.py): after one, no later step runs.
REFUSED_DRIVER_FIRST=26
REFUSED_DRIVER_LAST=29

lane_interrupted() {  # lane_interrupted SIGNAL CODE: the trap of an interrupt; no later step runs
    echo "$LANE lane: interrupted ($1); no later step runs" >&2
    exit "$2"
}

lane_step() {  # lane_step STEP -> runs phase STEP in its own span; returns its exit code
    local step=$1 rc
    if [ -n "${LANE_REFUSED:-}" ]; then
        return "$LANE_REFUSED"
    fi
    alpha observe step "$step" -- "$LANE_PYTHON" -m lanekit "$step" "$LANE" "$OUT" ${LANE_CONFIG:+"$LANE_CONFIG"}
    rc=$?
    if [ "$rc" -ge "$REFUSED_DRIVER_FIRST" ] && [ "$rc" -le "$REFUSED_DRIVER_LAST" ]; then
        LANE_REFUSED=$rc
        echo "$LANE lane: $step: the driver refused (exit $rc, its refused: line says why); no later step runs" >&2
    fi
    return $rc
}

lane_main() {
    if [ $# -ne 3 ] || [ -z "$3" ]; then
        echo "usage: $(basename "$0") OUT" >&2
        return 2
    fi
    LANE=$1
    LANE_REFUSED=
    local variable=$2
    OUT=$3
    LANE_CONFIG="${!variable:-}"
    mkdir -p "$OUT" || return 1
    ALPHA_LANE_LEDGER="$(mktemp "${TMPDIR:-/tmp}/lane-ledger.XXXXXX")" || return 1
    export ALPHA_LANE_LEDGER
    trap 'rm -f "$ALPHA_LANE_LEDGER"' EXIT
    trap 'lane_interrupted SIGINT 130' INT
    trap 'lane_interrupted SIGTERM 143' TERM

    local failed=0
    lane_step static-build || failed=1
    lane_step static-check || failed=1

    if [ -z "$LANE_CONFIG" ]; then
        echo "$LANE lane: static half done; the physical lane did not run ($variable is not set)"
        return $failed
    fi
    if [ ! -f "$LANE_CONFIG" ]; then
        echo "$LANE lane: $variable names $LANE_CONFIG, which is not a file" >&2
        # Preflight still runs so the stream records why the physical lane stopped.
    fi

    if ! lane_step preflight; then
        echo "$LANE lane: preflight did not admit the devices; the physical lane stops here" >&2
        return 1
    fi
    if ! lane_step build; then
        echo "$LANE lane: build failed; the physical lane stops here" >&2
        return 1
    fi

    local rc
    lane_step refusal-wrong-uuid; rc=$?
    [ "$rc" -eq "$REFUSED_DEVICE_UUID" ] || { echo "$LANE lane: wrong-UUID control exited $rc" >&2; failed=1; }
    lane_step refusal-wrong-product; rc=$?
    [ "$rc" -eq "$REFUSED_NVIDIA_PLAN_HOST" ] || { echo "$LANE lane: wrong-product control exited $rc" >&2; failed=1; }

    if ! lane_step uninterrupted-run; then
        echo "$LANE lane: the uninterrupted run failed; the physical lane stops here" >&2
        return 1
    fi
    lane_step split-run || failed=1
    if [ "$LANE" != partitioned ]; then
        lane_step host-shadow-control || failed=1
    fi
    lane_step fresh-evaluation || failed=1
    lane_step corrupted-checkpoint; rc=$?
    [ "$rc" -eq "$REFUSED_CHECKPOINT_CHUNK" ] || { echo "$LANE lane: corrupted-checkpoint control exited $rc" >&2; failed=1; }
    lane_step qualification || failed=1

    if [ -n "${LANE_REFUSED:-}" ]; then
        return 1
    fi
    if [ $failed -eq 0 ]; then
        echo "$LANE lane: physical lane complete; qualification in $OUT/qualification.json"
    else
        echo "$LANE lane: physical lane complete with failures (see the receipts)" >&2
    fi
    return $failed
}
