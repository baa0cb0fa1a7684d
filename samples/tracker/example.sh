#!/usr/bin/env bash
# The tracker's worked example (samples/tracker/README.md walks through it).
#
#   bash samples/tracker/example.sh [WORKDIR]
#
# Builds a tracker with two milestones and four work items, records the
# distributed-device lane under its gate (no lane config: a passing
# static-scope stream), attaches that stream to a run, and then shows the
# database refusing what the stream does not support: a physical pass on the
# run, and a hardware work item marked verified with it. A non-hardware item
# is verified with the same stream. Ends with status, next, show and audit.
#
# Re-runnable: WORKDIR (default: $TMPDIR/alpha-tracker-example) is emptied first.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${1:-${TMPDIR:-/tmp}/alpha-tracker-example}
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)
db="$work/progress.sqlite3"
stream="$work/distributed-static.aos"

show() {  # echo a command as one would type it
    local arg line='$'
    for arg in "$@"; do
        case $arg in *[[:space:]]*) line+=" \"$arg\"" ;; *) line+=" $arg" ;; esac
    done
    printf '\n%s\n' "$line"
}
tracker() { show alpha tracker "$@"; alpha tracker "$@"; }
refused() {  # run a command that must be refused; fail the example if it is not
    show "$@"
    if "$@"; then
        echo "example: expected a refusal from: $*" >&2
        exit 1
    fi
}

# Every `alpha tracker` and `alpha observe attach` below uses this database.
export ALPHA_TRACKER_DB="$db"

tracker init
tracker milestone add M1 "Static lanes"
tracker milestone add M2 "Physical qualification"
tracker item add N1 "Build every role of the distributed lane" -m M1 --status implemented
tracker item add N2 "Check every role's executable" -m M1 --status in-progress -d N1
tracker item add N10 "Distributed lane on an RTX 3070 + RTX 3090" -m M2 --hardware -d N2
tracker item add N11 "Coordinate lane on two GPUs" -m M2 --hardware -d N10
tracker experiment add distributed-lane --item N10

show alpha tracker run start --experiment distributed-lane --lane distributed-device
run=$(alpha tracker run start --experiment distributed-lane --lane distributed-device --note "CI: static half only")
echo "$run"

# Record the lane under its gate. No ALPHA_PARTITIONED_DEVICE_CONFIG: the static
# half runs, and a pass has scope static ("physical lane did not run").
show alpha observe gate distributed-device --out "$stream" -- bash scripts/ci/distributed-device.sh "$work/lane"
(
    cd "$root"
    env -u ALPHA_PARTITIONED_DEVICE_CONFIG \
        alpha observe gate distributed-device --quiet --out "$stream" -- \
        bash scripts/ci/distributed-device.sh "$work/lane" 2>&1 | tail -n 1
)

show alpha observe attach "$stream" --db "$db" --run "$run"
alpha observe attach "$stream" --db "$db" --run "$run"

# A static pass is not a physical pass: the database refuses to record one.
refused alpha tracker run finish "$run" --state completed --physical-pass
tracker run finish "$run" --state completed

# Nor does it verify a hardware item ...
refused alpha tracker item set N10 --status verified --run "$run"
# ... but it is acceptance evidence for the static item it covers.
tracker item set N2 --status verified --run "$run"

tracker status
tracker next
tracker show N10
tracker show "$run"
tracker audit
