#!/usr/bin/env bash
# The tracker with real physical evidence: the two-GPU H200 streams of
# samples/evidence/two-gpu-h200/ (samples/tracker/README.md walks through it).
#
#   bash samples/tracker/two_gpu.sh [WORKDIR]
#
# Builds a tracker with one milestone, three hardware work items (one per device
# lane) and the machine's two GPUs. For each lane, one run holds its forward and
# its role-swapped stream (both pass, scope physical): the run is finished
# completed with a physical pass (accepted) and verifies the lane's item. Each
# negative control gets a run of its own: a physical pass is refused for it, and
# so is verifying an item with it. Ends with status, show and audit, and writes
# the tracker's static site to WORKDIR/site (samples/tracker/two-gpu-site/ is a
# copy of it).
#
# The committed streams are attached where they are (attach records their
# absolute paths; audit re-reads them there). No GPU is needed.
#
# The streams were recorded on the lent machine, where no tracker ran, before
# this tracker existed; evidence must be recorded after its run started, so each
# run is registered with the session's declared start (--started-at, the minute
# the device session began: the first stream opened at 13:16:02 UTC). The run ids
# (UUIDv7) keep the time they were registered, so the import is visible.
# Re-runnable: WORKDIR (default: $TMPDIR/alpha-tracker-two-gpu) is emptied first.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
evidence="$root/samples/evidence/two-gpu-h200"
work=${1:-${TMPDIR:-/tmp}/alpha-tracker-two-gpu}
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)

GPU0=GPU-bb5a03ab-c28f-2074-5197-3838b9dd4798
GPU1=GPU-275f8d7e-27b9-87cf-bff1-529752b689a5
SESSION_START=2026-11-30T13:16:00Z  # the device session's start (samples/evidence/two-gpu-h200/README.md)

show() {  # echo a command as one would type it
    local arg line='$'
    for arg in "$@"; do
        case $arg in *[[:space:]]*) line+=" \"$arg\"" ;; *) line+=" $arg" ;; esac
    done
    printf '\n%s\n' "$line"
}
tracker() { show alpha tracker "$@"; alpha tracker "$@"; }
attach() { show alpha observe attach "$@"; alpha observe attach "$@"; }
refused() {  # run a command that must be refused; fail the example if it is not
    show "$@"
    if "$@"; then
        echo "two_gpu: expected a refusal from: $*" >&2
        exit 1
    fi
}
start() {  # start RUN-ARGS...: register a run of the device session and print its id alone
    show alpha tracker run start --started-at "$SESSION_START" "$@" >&2
    alpha tracker run start --started-at "$SESSION_START" "$@"
}

# Every `alpha tracker` and `alpha observe attach` below uses this database.
export ALPHA_TRACKER_DB="$work/progress.sqlite3"

tracker init
tracker milestone add M2 "Physical qualification"
tracker item add N10 "Distributed lane on two GPUs" -m M2 --hardware
tracker item add N11 "Coordinate lane on two GPUs" -m M2 --hardware
tracker item add N12 "Independent lane on two GPUs" -m M2 --hardware
tracker device add --product "NVIDIA H200" --uuid "$GPU0" --driver 580.159.04
tracker device add --product "NVIDIA H200" --uuid "$GPU1" --driver 580.159.04

declare -A item=([distributed-device]=N10 [coordinate-device]=N11 [independent-device]=N12)
declare -A lane_run=()
for gate in distributed-device coordinate-device independent-device; do
    tracker experiment add "${gate%-device}-two-gpu" --item "${item[$gate]}"
    run=$(start --experiment "${gate%-device}-two-gpu" --lane "$gate" --device "$GPU0" --device "$GPU1" \
        --note "two H200s: roles on minors [0, 1], then swapped to [1, 0]")
    echo "$run"
    lane_run[$gate]=$run
    attach "$evidence/forward/$gate.aos" --run "$run"
    attach "$evidence/swapped/$gate.aos" --run "$run"
    # Both streams are a sealed pass of scope physical: the physical pass is accepted.
    tracker run finish "$run" --state completed --physical-pass
done

# The negative controls, each in a run of its own. Neither stream is a pass, so
# the database refuses a physical pass for the run, and refuses it as evidence.
control() {  # control NAME STATE
    local run
    run=$(start --experiment coordinate-two-gpu --lane coordinate-device --device "$GPU0" --device "$GPU1" \
        --note "negative control: $1")
    echo "$run"
    attach "$evidence/$1/coordinate-device.aos" --run "$run"
    refused alpha tracker run finish "$run" --state completed --physical-pass
    tracker run finish "$run" --state "$2"
    refused alpha tracker item set N11 --status verified --run "$run"
}
control control-visible-swap failed
control control-busy inconclusive

# The lanes' own runs verify their hardware items.
for gate in distributed-device coordinate-device independent-device; do
    tracker item set "${item[$gate]}" --status verified --run "${lane_run[$gate]}"
done

tracker status
tracker run list
tracker show N11
tracker show "${lane_run[coordinate-device]}"
tracker audit
tracker site "$work/site"
