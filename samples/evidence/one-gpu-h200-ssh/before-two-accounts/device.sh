#!/bin/bash
# The one device call (issue 22's pod check and issue 21's container check), run from the carried folder:
#   bash device.sh OUT DEBS   (PYTHONPATH: this checkout and the carried wheels)
# OpenSSH is unpacked from the carried Debian packages when the machine has none (wrappers set its libraries).
set -u
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
    for tool in usr/sbin/sshd usr/bin/ssh usr/bin/ssh-keygen; do
        printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$libs" "$root/$tool" >"$bin/$(basename $tool)"
        chmod +x "$bin/$(basename $tool)"
    done
    export SSHD="$bin/sshd"
fi
id sshd >/dev/null 2>&1 || useradd -r -M -d /run/sshd -s /usr/sbin/nologin sshd
export PATH="$bin:$PATH"
cd "$repo"
echo "== machine"; uname -a; nvidia-smi -L || true; command -v python3; python3 --version; ls -l /usr/bin/python3
ssh -V; echo "sshd: ${SSHD:-/usr/sbin/sshd}"
echo "== (a) pod over SSH"
mkdir -p "$out/ssh"
python3 "$here/observe_pod.py" "$out/ssh" ${DRY:+--simulated}
echo "== (b) PID namespace with a CUDA tenant outside"
mkdir -p "$out/container"
python3 "$repo/samples/evidence/one-gpu-h200-container/observe_container.py" "$out/container" ${DRY:+--simulated}
echo "== done"
