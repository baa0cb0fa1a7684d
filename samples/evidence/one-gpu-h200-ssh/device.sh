#!/bin/bash
# The one device call (issue 31): the pod on the lent H200 machine set up as samples/pod/local-pod.sh sets one
# up (sshd on 127.0.0.1, the observer account root with its key in the environment, the lane account
# alpha-lane), then three recordings over SSH:
#   (a) worker: the observed-worker gate over lane.py, the worker on cuda:0 (--gpu);
#   (b) plant:  the coordinate-device lane on the CPU test doubles, with the lane account's usercustomize.py
#               planted (--plant): a forgery control, never a pass;
#   (c) lane:   the coordinate-device lane on the GPU (--gpu; one GPU: both roles on it).
#
#   bash device.sh OUT DEBS     (from the repository root; PYTHONPATH: the carried wheels and this checkout)
#
# OpenSSH is unpacked from the carried Debian packages where the machine has none (wrappers set its libraries).
# OUT gets device.log's lines on stdout, the three streams and evidence.tar.gz (configs, plant log, sshd logs).
# DRY=1: the rehearsal on a machine without a GPU (the test doubles in place of --gpu).
set -u
gpu=--gpu
[ -z "${DRY:-}" ] || gpu=""
out=$1 debs=$2
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
bin=/tmp/aos-bin
mkdir -p "$bin"
printf '#!/bin/sh\nexec %s -c "import sys; from observe.cli.entry import main; sys.argv[0] = \\"alpha\\"; main()" "$@"\n' \
    "$(command -v python3)" >"$bin/alpha"
chmod +x "$bin/alpha"
if [ -n "${FORCE_CARRIED_SSH:-}" ] || [ ! -x /usr/sbin/sshd ] || ! command -v ssh >/dev/null; then
    root=/tmp/aos-ssh
    for d in "$debs"/*.deb; do dpkg -x "$d" "$root"; done
    libs="$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu"
    for tool in usr/sbin/sshd usr/bin/ssh usr/bin/ssh-keygen usr/bin/scp; do
        printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$libs" "$root/$tool" >"$bin/$(basename $tool)"
        chmod +x "$bin/$(basename $tool)"
    done
    export SSHD="$bin/sshd"
    # scp starts its ssh by the path it was built with
    [ -e /usr/bin/ssh ] || cp "$bin/ssh" /usr/bin/ssh
fi
id sshd >/dev/null 2>&1 || useradd -r -M -d /run/sshd -s /usr/sbin/nologin sshd
export PATH="$bin:$PATH" PYTHONUNBUFFERED=1
cd "$repo" || exit 1
echo "== machine"
uname -a; nvidia-smi -L || true; command -v python3 nvidia-smi; python3 --version; ls -l /usr/bin/python3
/usr/bin/python3 --version; ssh -V; echo "sshd: ${SSHD:-/usr/sbin/sshd}"; ls -l /dev/nvidia*
echo "== the lane account and the GPU"
id alpha-lane >/dev/null 2>&1 || useradd --create-home --shell /bin/bash alpha-lane
getent shadow root | cut -d: -f1,2 | cut -c1-7
case $(getent shadow root | cut -d: -f2) in '!'*) echo "root was locked: key logins allowed"; usermod --password '*' root ;; esac
probe='import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
if [ -n "$gpu" ] && ! runuser -u alpha-lane -- "$(command -v python3)" -c "$probe"; then
    echo "alpha-lane cannot use the GPU: the device files made 0666, as a pod's are"
    chmod a+rw /dev/nvidia*
    runuser -u alpha-lane -- "$(command -v python3)" -c "$probe"
fi
work=/tmp/evidence
rm -rf "$work" && mkdir -p "$work"
echo "== (a) worker on cuda:0, observed-worker"
bash samples/pod/local-pod.sh $gpu --config-var ALPHA_PARTITIONED_DEVICE_CONFIG --minors 0 "$work/worker" observed-worker \
    --gate-file "$here/gate.toml" --sample-interval 0.5 -- python3 "$here/lane.py" "$work/worker/lane"
echo "== (b) the plant, on the test doubles, coordinate-device"
bash samples/pod/local-pod.sh --plant "$work/plant"
echo "== (c) coordinate-device on the GPU"
bash samples/pod/local-pod.sh $gpu "$work/lane"
echo "== done"
for name in worker plant lane; do cp "$work/$name/pod.aos" "$out/$name.aos"; done
tar -C "$work" -czf "$out/evidence.tar.gz" --exclude=lane/lane --exclude=host_key --exclude=lane_key \
    worker/lane-config.json worker/pod plant lane/lane-config.json lane/pod
