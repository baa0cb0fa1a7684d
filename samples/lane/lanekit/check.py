"""The lane's own check before rented minutes: what only the lane knows it needs on each node.

``python3 -m lanekit check LANE OUT CONFIG`` reaches every node of the config the way
the lane's phases do (its own OpenSSH connection as the ``host`` account, with
``node_env`` and ``python``; or this machine for a local config) and checks, per node:

- ``nvidia-smi`` answers and lists every minor the config binds there;
- ``python`` (the config's, default ``python3``) runs;
- the roles' runtime: ``torch`` imports and sees the bound card with CUDA (CUDA made to
  see that card's UUID alone, as a role does);
- ``remote_root`` can be made and written (a probe file, removed at once);
- its free disk is at least :data:`MIN_FREE_BYTES`.

It prints one table per node and a line per problem; exit 0 when the lane could run,
1 with each problem named. It records nothing and emits no receipt: it is the check an
engineer runs before a recording, beside ``alpha observe nodes check`` (which checks
what the recorder needs). A driver refusal (``host-key-unknown``, ...) exits with its code.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from .config import load_config
from .device import GPU_QUERY, parse_gpu_csv, run_smi
from .placement import Placement

__all__ = ["MIN_FREE_BYTES", "PROBE", "check"]

#: The least free disk under ``remote_root`` a node needs (the lane writes a few MiB; a full disk costs the run).
MIN_FREE_BYTES = 1 << 30

#: Run with the node's ``python`` and ``node_env``: ``python -c PROBE REMOTE_ROOT [UUID]``.
PROBE = """\
import json,os,sys,tempfile
root=sys.argv[1]
if len(sys.argv)>2:os.environ["CUDA_VISIBLE_DEVICES"]=sys.argv[2]
out={"python":sys.version.split()[0],"executable":sys.executable,"uid":os.getuid()}
try:
 import torch
 out["torch"]={"version":str(torch.__version__),"available":bool(torch.cuda.is_available()),
 "devices":int(torch.cuda.device_count())}
except Exception as e:
 out["torch"]={"error":type(e).__name__+": "+str(e)}
try:
 os.makedirs(root,exist_ok=True)
 fd,p=tempfile.mkstemp(prefix=".lanekit-check-",dir=root);os.close(fd);os.unlink(p)
 out["writable"]=None
except OSError as e:
 out["writable"]=str(e)
try:
 s=os.statvfs(root);out["free"]=s.f_bavail*s.f_frsize
except OSError:
 out["free"]=None
print(json.dumps(out))
"""


def _minors(config: dict[str, Any], place: Placement) -> dict[int, list[tuple[str, int]]]:
    """``(role, minor)`` per node index."""
    found: dict[int, list[tuple[str, int]]] = {}
    for role, minor in zip(place.owners, config["minors"], strict=True):
        found.setdefault(place.node_of(role), []).append((role, minor))
    return found


def _probe_local(python: str, root: str, uuid: str | None) -> tuple[int, str, str]:
    try:
        done = subprocess.run(
            [python, "-c", PROBE, root, *([uuid] if uuid else [])],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except OSError as exc:
        return 127, "", str(exc)
    return done.returncode, done.stdout, done.stderr


def _table(name: str, rows: list[tuple[str, str, str | None]]) -> list[str]:
    print(f"\nnode {name}")
    width = max(len(r[0]) for r in rows)
    for what, found, problem in rows:
        print(f"  {'ok     ' if problem is None else 'PROBLEM'}  {what.ljust(width)}  {found}")
        if problem:
            print(f"  {' ' * 7}  {' ' * width}  -> {problem}")
    return [f"{name}: {p}" for _w, _f, p in rows if p]


def _judge(
    smi: str | None, bound: list[tuple[str, int]], probe: tuple[int, str, str], python: str, root: str
) -> list[tuple[str, str, str | None]]:
    rows: list[tuple[str, str, str | None]] = []
    gpus = {g["minor"]: g for g in parse_gpu_csv(smi or "")}
    if smi is None:
        rows.append(("nvidia-smi", "no answer", "nvidia-smi cannot be queried (the node_env's PATH?)"))
    else:
        listed = ", ".join(f"minor {m} {g['uuid']}" for m, g in sorted(gpus.items()))
        rows.append(("nvidia-smi", listed or "no GPU", None))
    for role, minor in bound:
        if minor in gpus:
            rows.append((f"minor {minor} ({role})", f"present: {gpus[minor]['uuid']} {gpus[minor]['product']}", None))
        elif smi is not None:
            have = ", ".join(str(m) for m in sorted(gpus)) or "none"
            rows.append(
                (f"minor {minor} ({role})", "absent", f"the config binds {role} to minor {minor}; there: {have}")
            )
    status, stdout, stderr = probe
    said = stderr.strip()[-300:]
    try:
        answer = json.loads(stdout) if status == 0 else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        why = f"no {python} (exit 127)" if status == 127 else f"{python} exited {status}"
        rows.append(("python", "no answer", f"{why}{': ' + said if said else ''}"))
        return rows
    rows.append(("python", f"{answer.get('executable')} {answer.get('python')} (uid {answer.get('uid')})", None))
    torch = answer.get("torch") or {}
    if "error" in torch:
        rows.append(("torch", "missing", f"{torch['error']} (the config's python and node_env, e.g. PYTHONPATH)"))
    elif not torch.get("available"):
        rows.append(("torch", f"torch {torch.get('version')}", "torch sees no CUDA device at the bound card"))
    else:
        rows.append(("torch", f"torch {torch.get('version')} with CUDA, {torch.get('devices')} device(s)", None))
    if answer.get("writable") is None:
        rows.append(("remote_root", f"{root} writable", None))
    else:
        rows.append(("remote_root", root, f"cannot write there: {answer['writable']}"))
    free = answer.get("free")
    gib = f"{free / (1 << 30):.1f} GiB" if isinstance(free, int) else "unknown"
    low = not isinstance(free, int) or free < MIN_FREE_BYTES
    rows.append(("free disk", gib, f"less than {MIN_FREE_BYTES >> 30} GiB free under {root}" if low else None))
    return rows


def check(lane: str, out: str, config_path: str | None = None) -> int:
    """Check every node of the config for what the lane needs there; 0 when it could run, 1 with each problem."""
    config = load_config(str(config_path))
    problems: list[str] = []
    with Placement(config, lane, out) as place:
        bound = _minors(config, place)
        if place.local:
            python = str(config.get("python", "python3"))
            root = str(config["remote_root"])
            smi = run_smi(GPU_QUERY)
            uuid = _uuid(smi, bound.get(0, []))
            rows = _judge(smi, bound.get(0, []), _probe_local(python, root, uuid), python, root)
            problems += _table("local", rows)
        for index, (node, link) in enumerate(zip(place.nodes, place.links, strict=True)):
            smi = link.query([GPU_QUERY])[0]
            uuid = _uuid(smi, bound.get(index, []))
            done = link.run([node.python, "-c", PROBE, node.remote_root, *([uuid] if uuid else [])])
            probe = (done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace"))
            problems += _table(node.label, _judge(smi, bound.get(index, []), probe, node.python, node.remote_root))
    if problems:
        print(f"\n{len(problems)} problem{'s' if len(problems) != 1 else ''}; the {lane} lane would not run:")
        for line in problems:
            print(f"  - {line}")
        sys.stdout.flush()
        return 1
    print(f"\nthe {lane} lane could run on every node")
    return 0


def _uuid(smi: str | None, bound: list[tuple[str, int]]) -> str | None:
    gpus = {g["minor"]: g["uuid"] for g in parse_gpu_csv(smi or "")}
    return next((str(gpus[m]) for _role, m in bound if m in gpus), None)
