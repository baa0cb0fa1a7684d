#!/usr/bin/env bash
# A pod on this machine, set up as a real one is: try the device lanes over SSH without a GPU.
#
#   bash samples/pod/local-pod.sh [--gpu] [--plant] [--python PATH] [--config-var NAME] [--minors M,...] OUT
#                                 [GATE [OPTIONS] -- COMMAND...]
#
# Run as root, from the repository root, with alpha-observe[ssh] installed (`alpha` on PATH) and
# Debian's openssh-server and openssh-client. It starts a throwaway sshd on 127.0.0.1 (its own host
# key, port and known_hosts; never the machine's sshd, which it does not touch) serving two accounts,
# as a pod is set up for a qualification:
#
# - root, the observer account: its key (made here) goes to the recorder through the environment
#   variable OBSERVER_KEY (`--observer-key-env OBSERVER_KEY`), and is never a file the lane can read;
# - alpha-lane, the lane's unprivileged account (made once, reused), with a key of its own.
#
# It writes the lane config (OUT/lane-config.json) naming that node, then runs
#   alpha observe gate coordinate-device --out OUT/pod.aos --observer-key-env OBSERVER_KEY \
#       -- bash scripts/ci/coordinate-device.sh OUT/lane
# (or the GATE, OPTIONS and COMMAND given after OUT, with the config in --config-var's variable and the
# roles' GPU minors from --minors), and prints where the stream is and its verdict. It exits with the
# gate's exit code.
#
# Without --gpu the lane runs on its CPU test doubles (samples/lane/testing: a fake nvidia-smi and a
# fake torch, copied to the node and put on node_env's PATH and PYTHONPATH), and the recorder's node
# observer is given the same fake cards as simulated GPUs: expect `inconclusive` (exit 3), scope
# physical, open on devices-observed (the cards are simulated, not NVML) and on the rebuild (when
# OUT or the tree is not clean). With --gpu the node's own nvidia-smi and the interpreter that has
# torch with CUDA (--python, default the python3 on PATH) run the lane on GPU 0 (both roles on it when
# the machine has one GPU: then inconclusive for the shared UUID).
#
# --plant is a forgery control: before the recording, the lane account plants a usercustomize.py in
# its own site-packages that would relabel a simulated observation as NVML in any Python that loads
# it (and logs each load to OUT/plant.log). The observer, as root under `python3 -I -S`, never loads
# it: the verdict is not a pass. The plant is removed at the end (and before every run).
set -u

gpu="" plant="" python="" minors="" variable=ALPHA_COORDINATE_DEVICE_CONFIG
while [ $# -gt 0 ]; do
    case $1 in
        --gpu) gpu=1 ;;
        --plant) plant=1 ;;
        --python) python=${2:?--python needs a path}; shift ;;
        --config-var) variable=${2:?--config-var needs a name}; shift ;;
        --minors) minors="[${2:?--minors needs a list such as 0,1}]"; shift ;;
        -*) echo "local-pod: unknown option $1" >&2; exit 2 ;;
        *) break ;;
    esac
    shift
done
OUT=${1:?usage: local-pod.sh [--gpu] [--plant] [--python PATH] [--config-var NAME] [--minors M,...] OUT [GATE [OPTIONS] -- COMMAND...]}
shift
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SSHD=${SSHD:-/usr/sbin/sshd}
LANE_USER=alpha-lane
[ "$(id -u)" -eq 0 ] || { echo "local-pod: run as root (it makes the lane account and serves two accounts)" >&2; exit 2; }
for tool in "$SSHD" ssh ssh-keygen scp alpha python3; do
    command -v "$tool" >/dev/null || { echo "local-pod: $tool is not installed" >&2; exit 2; }
done
case $(getent shadow root | cut -d: -f2) in
    '!'*) echo "local-pod: root's account is locked ('!' in /etc/shadow), and an sshd without PAM refuses every" \
        "login to it; \`usermod --password '*' root\` allows key logins (no password)" >&2; exit 2 ;;
esac
[ -x /usr/bin/python3 ] || { echo "local-pod: the observer needs /usr/bin/python3 (3.9 or later)" >&2; exit 2; }

mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
work="$OUT/pod"
rm -rf "$work" "$OUT/pod.aos" "$OUT/lane" "$OUT/plant.log"
mkdir -p "$work" || exit 2
# What sshd reads as the lane account, and the plant's log, in a folder any account can reach (OUT may not be).
shared=$(mktemp -d /tmp/local-pod.XXXXXX) && chmod 755 "$shared" && mkdir -m 755 "$shared/authorized_keys" || exit 2
sshd_pid=""
# shellcheck disable=SC2329 # the EXIT trap calls it
cleanup() {
    [ -z "$sshd_pid" ] || { kill "$sshd_pid" 2>/dev/null; wait "$sshd_pid" 2>/dev/null; }
    [ -z "${plant_dir:-}" ] || rm -f "$plant_dir/usercustomize.py"
    [ ! -e "$shared/plant.log" ] || cp "$shared/plant.log" "$OUT/plant.log"
    rm -rf "$shared"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The lane's account: unprivileged, its own home, a usable (not locked) entry for sshd.
id "$LANE_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$LANE_USER" || exit 2
usermod --password '*' "$LANE_USER" || exit 2
home=$(getent passwd "$LANE_USER" | cut -d: -f6)
lane_py=$(/usr/bin/python3 -c 'import sys; print("python%d.%d" % sys.version_info[:2])')
plant_dir="$home/.local/lib/$lane_py/site-packages"
remove_plant() { rm -f "$plant_dir/usercustomize.py"; }
remove_plant

# Keys: the node's host key, the lane's key (a file the lane reads), the observer's (never a file after this).
ssh-keygen -q -t ed25519 -N "" -C local-pod-host -f "$work/host_key" || exit 2
ssh-keygen -q -t ed25519 -N "" -C "$LANE_USER" -f "$work/lane_key" || exit 2
ssh-keygen -q -t ed25519 -N "" -C local-pod-observer -f "$work/observer_key" || exit 2
cp "$work/lane_key.pub" "$shared/authorized_keys/$LANE_USER"
cp "$work/observer_key.pub" "$shared/authorized_keys/root"
chmod 644 "$shared"/authorized_keys/*
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "[127.0.0.1]:$port $(cut -d' ' -f1,2 "$work/host_key.pub")" >"$work/known_hosts"
cat >"$work/sshd_config" <<EOF
ListenAddress 127.0.0.1
Port $port
HostKey $work/host_key
AuthorizedKeysFile $shared/authorized_keys/%u
PidFile $work/sshd.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
X11Forwarding no
PrintMotd no
Subsystem sftp internal-sftp
EOF
mkdir -p /run/sshd
"$SSHD" -D -e -f "$work/sshd_config" 2>>"$work/sshd.log" </dev/null &
sshd_pid=$!
lane_ssh=(ssh -F /dev/null -p "$port" -i "$work/lane_key" -o BatchMode=yes -o IdentitiesOnly=yes
    -o StrictHostKeyChecking=yes -o "UserKnownHostsFile=$work/known_hosts" -o GlobalKnownHostsFile=/dev/null)
for _ in $(seq 100); do
    "${lane_ssh[@]}" "$LANE_USER@127.0.0.1" true 2>/dev/null && break
    kill -0 "$sshd_pid" 2>/dev/null || { cat "$work/sshd.log" >&2; exit 2; }
    sleep 0.2
done
"${lane_ssh[@]}" "$LANE_USER@127.0.0.1" true || { cat "$work/sshd.log" >&2; exit 2; }
echo "local-pod: sshd on 127.0.0.1:$port (host key $(ssh-keygen -lf "$work/host_key.pub" | cut -d' ' -f2)); accounts root (observer) and $LANE_USER (lane)"

# The node's side, owned by the lane account: its remote_root, and (without --gpu) the test doubles.
node="$home/local-pod"
rm -rf "$node" && mkdir -p "$node/runs" || exit 2
if [ -n "$gpu" ]; then
    smi=$(command -v nvidia-smi) || { echo "local-pod: --gpu needs nvidia-smi" >&2; exit 2; }
    python=${python:-$(command -v python3)}
    "$python" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' \
        || { echo "local-pod: $python has no torch with CUDA" >&2; exit 2; }
    row=$("$smi" --query-gpu=index,name,driver_version --format=csv,noheader | awk -F', *' '$1 == 0')
    product=$(echo "$row" | awk -F', *' '{print $2}')
    driver=$(echo "$row" | awk -F', *' '{print $3}')
    count=$("$smi" --query-gpu=index --format=csv,noheader | wc -l)
    [ -n "$minors" ] || minors=$([ "$count" -ge 2 ] && echo "[0, 1]" || echo "[0, 0]")
    path="$(dirname "$smi"):/usr/local/bin:/usr/bin:/bin"
    pythonpath=""
    simulated=""
else
    cp -r "$repo/samples/lane/testing" "$node/doubles"
    python=${python:-python3} product="" driver="" minors=${minors:-[0, 1]}
    path="$node/doubles/bin:/usr/local/bin:/usr/bin:/bin"
    pythonpath="$node/doubles"
    simulated="$work/simulated-gpus.json"
    python3 "$repo/samples/lane/testing/gpus.py" --simulated >"$simulated" || exit 2
    if [ -n "$plant" ]; then
        # What the plant would need: each role's process on its fake card, as the lane's doubles claim.
        python3 - "$simulated" <<'PY' || exit 2
import json, sys
doc = json.load(open(sys.argv[1]))
doc["processes"] = [
    {"gpu": doc["gpus"][card]["uuid"], "pid": "tree", "argv_contains": role, "used_memory": 1 << 30}
    for card, role in ((0, "owner-0.pyz coordinate"), (0, "owner-0.pyz serve"), (1, "owner-1.pyz serve"))
]
json.dump(doc, open(sys.argv[1], "w"), indent=1)
PY
    fi
fi
chown -R "$LANE_USER:" "$node"
chmod -R a+rX "$node"

config="$OUT/lane-config.json"
HOST="$LANE_USER@127.0.0.1" PORT=$port WORK=$work ROOT="$node/runs" MINORS=$minors PYTHON_=$python \
    PATH_=$path PYTHONPATH_=$pythonpath PRODUCT=$product DRIVER=$driver python3 - "$config" <<'PY' || exit 2
import json, os, sys
e = os.environ
node_env = {"PATH": e["PATH_"]}
if e["PYTHONPATH_"]:
    node_env["PYTHONPATH"] = e["PYTHONPATH_"]
if e.get("LD_LIBRARY_PATH") and e["PRODUCT"]:
    node_env["LD_LIBRARY_PATH"] = e["LD_LIBRARY_PATH"]
config = {
    "owner": "local-pod",
    "pod_ids": ["local-pod"],
    "host": e["HOST"],
    "port": int(e["PORT"]),
    "ssh_key": f"{e['WORK']}/lane_key",
    "known_hosts": f"{e['WORK']}/known_hosts",
    "observer": {"user": "root", "python": "/usr/bin/python3"},
    "minors": json.loads(e["MINORS"]),
    "remote_root": e["ROOT"],
    "transport": "loopback",
    "python": e["PYTHON_"],
    "node_env": node_env,
}
if e["PRODUCT"]:
    config["products"] = sorted({e["PRODUCT"], "NVIDIA GeForce RTX 3070", "NVIDIA GeForce RTX 3090"})
    config["driver"] = sorted({e["DRIVER"].split(".")[0], "580"})
with open(sys.argv[1], "w") as fh:
    json.dump(config, fh, indent=2)
    fh.write("\n")
PY

if [ -n "$plant" ]; then
    # The lane account writes it, in its own account, over its own SSH login: nothing of root's is touched.
    "${lane_ssh[@]}" "$LANE_USER@127.0.0.1" "mkdir -p '$plant_dir' && cat > '$plant_dir/usercustomize.py'" <<EOF
# Planted by the lane account (a forgery control): in any Python that loads it, a simulated GPU
# observation is relabelled as NVML, and each load is logged (uid and argv) to $shared/plant.log.
import json, os, sys
try:
    with open("$shared/plant.log", "a") as log:
        log.write(f"uid {os.getuid()} loaded usercustomize: {sys.executable} {sys.argv!r}\n")
except OSError:
    pass
_dumps = json.dumps
def _relabel(value):
    if isinstance(value, dict):
        value = {k: _relabel(v) for k, v in value.items()}
        if value.get("observer") == "simulated":
            value.update(observer="nvml", simulated_from=None)
    elif isinstance(value, list):
        value = [_relabel(v) for v in value]
    return value
def dumps(obj, *args, **kwargs):
    return _dumps(_relabel(obj), *args, **kwargs)
json.dumps = dumps
EOF
    touch "$shared/plant.log" && chmod 666 "$shared/plant.log"
    "${lane_ssh[@]}" "$LANE_USER@127.0.0.1" "/usr/bin/python3 -c 'pass'"
    echo "local-pod: planted $plant_dir/usercustomize.py as $LANE_USER; the lane account's python3 loads it:"
    cat "$shared/plant.log"
fi

if [ $# -eq 0 ]; then
    set -- coordinate-device -- bash scripts/ci/coordinate-device.sh "$OUT/lane"
fi
gate=$1
shift
cd "$repo" || exit 2
(
    key=$(cat "$work/observer_key") && rm -f "$work/observer_key" || exit 2
    export OBSERVER_KEY=$key "$variable=$config"
    [ -z "$simulated" ] || export ALPHA_OBSERVE_SIMULATED_GPUS="$simulated"
    echo "local-pod: running alpha observe gate $gate --out $OUT/pod.aos --observer-key-env OBSERVER_KEY $*"
    exec alpha observe gate "$gate" --out "$OUT/pod.aos" --observer-key-env OBSERVER_KEY "$@"
)
rc=$?
verdict=$(alpha observe verdict "$OUT/pod.aos" --json 2>/dev/null \
    | python3 -c 'import json, sys; v = json.load(sys.stdin); print(v["verdict"], "(scope " + v["scope"] + ")")')
echo "local-pod: stream $OUT/pod.aos: ${verdict:-no verdict}, gate exit $rc; lane config $config"
if [ -z "$gpu" ]; then
    echo "local-pod: expected inconclusive (exit 3): the lane ran every step on the CPU test doubles,"
    echo "  and the recorder's observer on the node (root, /usr/bin/python3 -I -S) saw simulated cards, not NVML:"
    echo "  devices-observed stays open. A physical pass needs real GPUs observed through NVML (run with --gpu on a pod)."
fi
if [ -n "$plant" ]; then
    echo "local-pod: plant log (a uid 0 line would mean the observer loaded the lane account's code):"
    cat "$shared/plant.log"
fi
exit $rc
