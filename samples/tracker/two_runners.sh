#!/usr/bin/env bash
# Evidence beyond one machine: two runners push their streams to a store, a
# shared PostgreSQL tracker attaches them by URL, and a third directory with no
# local copy audits them (docs/STORE.md, docs/TRACKER.md).
#
#   bash samples/tracker/two_runners.sh [WORKDIR]
#
# WORKDIR (default: $TMPDIR/alpha-tracker-two-runners) is emptied first and gets
# runner-a/, runner-b/ (each records a gated command and pushes its stream, then
# deletes it), store/ (the content-addressed store: `file://`; set ALPHA_STORE to
# s3://BUCKET/PREFIX to use S3-compatible storage instead) and auditor/ (attaches
# by URL and audits, with no stream file of its own).
#
# The tracker is $ALPHA_TRACKER_DB when it names a postgresql:// database;
# otherwise the script starts a throw-away local PostgreSQL server
# (tracker/pglocal.py, from the `postgres` extra) for the run and stops it after.
set -euo pipefail

work=${1:-${TMPDIR:-/tmp}/alpha-tracker-two-runners}
rm -rf "$work"
mkdir -p "$work/runner-a" "$work/runner-b" "$work/auditor" "$work/store"
work=$(cd "$work" && pwd)
store=${ALPHA_STORE:-file://$work/store}

show() { printf '\n$ %s\n' "$*"; }
run() { show "$@"; "$@"; }

server_pid=
if [[ ${ALPHA_TRACKER_DB:-} != postgresql://* ]]; then
    # A throw-away server for this example: it prints its database URL, then waits to be stopped.
    python3 - "$work/tracker-url" <<'PY' &
import signal, sys
from tracker.pglocal import LocalServer

server = LocalServer().start()
signal.signal(signal.SIGTERM, lambda *_: (server.stop(), sys.exit(0)))
with open(sys.argv[1] + ".tmp", "w") as fh:
    fh.write(server.create_database("two_runners"))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
signal.pause()
PY
    server_pid=$!
    trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null || true' EXIT
    for _ in $(seq 1 600); do [ -f "$work/tracker-url" ] && break; sleep 0.1; done
    [ -f "$work/tracker-url" ] || { echo "two_runners: the local PostgreSQL server did not start" >&2; exit 1; }
    ALPHA_TRACKER_DB=$(cat "$work/tracker-url")
fi
export ALPHA_TRACKER_DB
echo "tracker: ${ALPHA_TRACKER_DB%%\?*}"
echo "store:   $store"

run alpha tracker init
# The runs exist before their evidence is recorded (tracker-evidence-time).
show alpha tracker run start --lane exit-zero --note "runner A"
run_a=$(alpha tracker run start --lane exit-zero --note "runner A")
echo "$run_a"
show alpha tracker run start --lane exit-zero --note "runner B"
run_b=$(alpha tracker run start --lane exit-zero --note "runner B")
echo "$run_b"

runner() {  # runner NAME: record a gated command in runner-NAME/, push the stream, delete the local copy
    cd "$work/runner-$1"
    run alpha observe gate exit-zero --quiet --label "runner=$1" --out "$1.aos" -- sh -c "echo building on runner $1"
    show alpha observe push "$1.aos" --store "$store"
    alpha observe push "$1.aos" --store "$store" >"$work/$1.url"
    cat "$work/$1.url"
    rm "$1.aos"  # the runner is gone; the evidence is in the store
}
(runner a)
(runner b)

cd "$work/auditor"
url_a=$(cat "$work/a.url")
url_b=$(cat "$work/b.url")
run alpha observe attach "$url_a" --run "$run_a"
run alpha observe attach "$url_b" --run "$run_b"
run alpha tracker run finish "$run_a" --state completed
run alpha tracker run finish "$run_b" --state completed
run alpha tracker status
# No stream file anywhere but the store: audit fetches each one again and re-verifies it.
show find "$work" -name '*.aos' -not -path "$work/store/*"
find "$work" -name '*.aos' -not -path "$work/store/*"
run alpha tracker audit
