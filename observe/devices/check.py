"""``alpha observe nodes check``: every node a lane config names, reached as the recorder would, before a recording.

For each remote node (observe.devices.lane_nodes, through the one lane-config reader), one
node after the other, it:

1. runs the recorder's own observer there once (observe.devices.remote.NodeLink: the same
   connection to the observer account with the observer's key, host-key verification,
   isolated interpreter and bundle a recording uses) and reads its start observation:
   reachable, host key, the observer's login and interpreter, the lane account's uid as the
   observer looked it up, the node's other SSH sessions, NVML and the driver, the GPUs and
   the minors the config binds there;
2. logs in as the lane's own account (the ``host`` user, with the config's ``ssh_key``, the
   host key verified the same way) and runs :data:`PROBE` with the config's ``python`` and
   ``node_env``: python3, the roles' runtime (``torch`` seeing the bound GPU with CUDA),
   ``remote_root`` writable and its free disk.

Each finding is a row of the node's table; a row with a problem names it (what a recording
would not observe, or where the lane would stop). Nothing is recorded and nothing is written
on a node but a probe file in ``remote_root``, removed at once. A simulated observer
(``ALPHA_OBSERVE_SIMULATED_GPUS``) reads ``simulated`` in the NVML row and is not a problem:
the node is observed as a recording would, never physically.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from aos import kinds
from observe.devices.lane_config import LaneConfigProblem, MinorBoundTwice, node_entries, role_binding
from observe.devices.lane_nodes import Node, lane_nodes
from observe.devices.observers import ENV_SIMULATED, lane_configs
from observe.exits import Exit

if TYPE_CHECKING:
    from observe.devices.remote import ObserverKey

__all__ = ["MIN_FREE_BYTES", "PROBE", "NodeReport", "Report", "Row", "check_config", "default_config"]

#: Free disk under ``remote_root`` below which the lane is not started (a role's outputs are a few KiB,
#: its executables a few hundred; a full disk mid-run costs the rented minutes).
MIN_FREE_BYTES = 1 << 30
#: Seconds to wait for a node's start observation (connection, handshake and login take up to 10 s each).
START_TIMEOUT = 40.0
#: The most a probe may print.
PROBE_MAX = 1 << 16

#: Run as the lane account with the config's ``python`` and ``node_env``: ``python -c PROBE REMOTE_ROOT [UUID]``
#: (UUID: a bound GPU the observer saw; CUDA is made to see it alone, as a role sees its card).
PROBE = """\
import json,os,sys,tempfile,pwd
root=sys.argv[1]
if len(sys.argv)>2:os.environ["CUDA_VISIBLE_DEVICES"]=sys.argv[2]
out={"uid":os.getuid(),"user":pwd.getpwuid(os.getuid()).pw_name,"python":sys.version.split()[0],
"executable":sys.executable}
try:
 import torch
 out["torch"]={"version":str(getattr(torch,"__version__","?")),"cuda":str(getattr(torch.version,"cuda",None)),
 "available":bool(torch.cuda.is_available()),"devices":int(torch.cuda.device_count())}
except Exception as e:
 out["torch"]={"error":type(e).__name__+": "+str(e)}
try:
 os.makedirs(root,exist_ok=True)
 fd,p=tempfile.mkstemp(prefix=".alpha-nodes-check-",dir=root);os.close(fd);os.unlink(p)
 out["writable"]=True
except OSError as e:
 out["writable"]=False;out["write_error"]=str(e)
try:
 s=os.statvfs(root);out["free"]=s.f_bavail*s.f_frsize
except OSError:
 out["free"]=None
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Row:
    """One line of a node's table: what was checked, what was found, and the problem (None: fine)."""

    what: str
    found: str
    problem: str | None = None


@dataclass
class NodeReport:
    """One node's table."""

    name: str
    rows: list[Row] = field(default_factory=list)

    def add(self, what: str, found: str, problem: str | None = None) -> None:
        self.rows.append(Row(what, found, problem))

    @property
    def problems(self) -> list[str]:
        return [f"{self.name}: {r.problem}" for r in self.rows if r.problem]


@dataclass
class Report:
    """Every node of one config; ``problems`` also holds what kept the config from naming its nodes."""

    config: str
    nodes: list[NodeReport] = field(default_factory=list)
    config_problems: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return [*self.config_problems, *(p for n in self.nodes for p in n.problems)]

    @property
    def ok(self) -> bool:
        return not self.problems


class ConfigUnusable(ValueError):
    """The config cannot be checked at all (missing, unreadable, not JSON, no remote node)."""


def default_config(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The ``(NAME, path)`` of each device config the environment names (``ALPHA_*_DEVICE_CONFIG``)."""
    return lane_configs(env)


# -- the config's lane-side facts per node -------------------------------------------------------


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def _minors(config: dict[str, Any], roles: tuple[int, ...]) -> list[tuple[str, int]]:
    """``(role, minor)`` the config binds on a node: its ``roles`` (role indices) of an ``ssh-tunnel`` config, or
    every role of a ``loopback`` pod (empty ``roles``); as the lane reads them (``lane_config.role_binding``)."""
    try:
        binding = role_binding(config)
    except LaneConfigProblem:
        return []
    return [(binding.roles[i], binding.minors[i]) for i in (roles or range(len(binding.minors)))]


def _entry_of(config: dict[str, Any], entries: list[dict[str, Any]], roles: tuple[int, ...]) -> dict[str, Any]:
    """The (merged) config entry of the node carrying ``roles`` (the first entry for a ``loopback`` pod)."""
    if not roles:
        return entries[0]
    try:
        return entries[role_binding(config).nodes[roles[0]]]
    except (LaneConfigProblem, IndexError):
        return entries[roles[0]] if roles[0] < len(entries) else entries[0]


# -- the observer, as a recording runs it ---------------------------------------------------------


def _observe(node: Node, env: Mapping[str, str], key: ObserverKey | None) -> tuple[dict[str, Any] | None, str | None]:
    """The node's start observation (None when none came), and why the node was lost after it (None: it was not),
    from the recorder's observer run once there (observe.devices.remote.observe_once)."""
    import base64

    from observe.devices.remote import observe_once

    sim_path = env.get(ENV_SIMULATED)
    simulated = None
    if sim_path:  # as a recording sends it to each node's observer
        try:
            with open(sim_path, "rb") as f:
                data = f.read(1 << 20)
        except OSError:
            data = b""
        simulated = {"path": os.path.abspath(sim_path), "data_b64": base64.b64encode(data).decode()}
    found = observe_once(node, key, simulated=simulated, timeout=START_TIMEOUT)
    start = next((a for k, a in found if k == kinds.DEVICE_OBSERVED and a.get("phase") == "start"), None)
    lost = next((str(a.get("reason")) for k, a in found if k == kinds.NODE_LOST), None)
    return start, lost


def _observer_rows(report: NodeReport, node: Node, start: dict[str, Any] | None, minors: list[tuple[str, int]]) -> bool:
    """The observer's rows; whether the node was reached and its host key verified."""
    if start is None:
        report.add("reachable", "no answer", f"no observation within {START_TIMEOUT:.0f} s")
        return False
    facts = start.get("node") or {}
    refused = facts.get("refused")
    error = start.get("error")
    reached = facts.get("host_key") is not None
    report.add(
        "reachable",
        f"{node.address}:{node.port} as {node.user}" if reached else "no",
        None if reached else (error or "unreachable"),
    )
    if not reached:
        return False
    key = facts["host_key"]
    if facts.get("host_key_verified"):
        report.add("host key", f"{key['type']} {key['sha256']} (in {node.known_hosts})")
    else:
        problem = error or refused or "not verified"
        report.add("host key", f"{key['type']} {key['sha256']}", problem)
        return False
    if refused:
        report.add("observer login", f"{node.user} refused ({refused})", error)
        return True
    source = facts.get("key")
    report.add(
        "observer login",
        f"{node.user} uid {facts.get('observer_uid')}, key from {'the environment' if source == 'env' else source}",
        None
        if source == "env"
        else "the observer's key is a file the recorded command could read (--observer-key): the node is observed "
        "but never physical evidence; give it with --observer-key-env NAME",
    )
    python = facts.get("python")
    isolated = facts.get("isolated")
    report.add(
        "observer interpreter",
        f"{facts.get('executable')} (python {python}, sha256 {facts.get('executable_sha256')})"
        + (", isolated (-I -S)" if isolated else ""),
        None if python and isolated else (error or "the observer's interpreter did not run isolated (-I -S)"),
    )
    lane_uid = facts.get("lane_uid")
    if node.lane_user == node.user:
        problem = (
            f"the lane's account is the observer's ({node.user}): whatever the lane plants in it runs in the "
            'observer; give the lane an account of its own (useradd, its authorized_keys) or name another in "observer"'
        )
    elif lane_uid == 0:
        problem = (
            f"the lane's account {node.lane_user} is root (uid 0) on the node: root can forge what the observer "
            "reads; use an unprivileged account (useradd; the GPU device files are usually 0666)"
        )
    elif lane_uid is None:
        problem = f"the node has no account {node.lane_user}"
    else:
        problem = None
    report.add("lane account", f"{node.lane_user} uid {lane_uid}", problem)
    others = [x for x in facts.get("sessions") or [] if isinstance(x, dict)]
    risky = [x for x in others if x.get("user") in (node.user, "root")]
    report.add(
        "other sessions",
        ", ".join(f"{x.get('user')} (pid {x.get('pid')})" for x in others) or "none",
        None
        if not risky
        else f"another session of {' or '.join(sorted({node.user, 'root'}))} is open on the node "
        f"({', '.join(str(x.get('pid')) for x in risky)}): a recording while it stays open is inconclusive",
    )
    observer = start.get("observer")
    driver = start.get("driver")
    if observer == "nvml":
        library = start.get("library") or {}
        report.add("NVML and driver", f"nvml, driver {driver}, {library.get('path')} ({library.get('sha256')})")
    elif observer == "simulated":
        source = (start.get("simulated_from") or {}).get("path")
        report.add("NVML and driver", f"simulated ({source}), driver {driver}: never physical evidence")
    else:
        report.add(
            "NVML and driver", str(observer), f"no NVML on the node: {error}" if error else "no NVML on the node"
        )
        report.add("GPUs", "not observed", None)  # the cause is the row above
        return True
    gpus = start.get("gpus") or []
    present = {g.get("minor"): g for g in gpus}
    listed = ", ".join(f"minor {g.get('minor')} {g.get('uuid')} {g.get('name')}" for g in gpus) or "none"
    report.add("GPUs", listed)
    for role, minor in minors:
        if minor in present:
            report.add(f"minor {minor} ({role})", f"present: {present[minor].get('uuid')}")
        else:
            have = ", ".join(str(m) for m in sorted(m for m in present if isinstance(m, int))) or "none"
            report.add(
                f"minor {minor} ({role})", "absent", f"the config binds {role} to minor {minor}; the node has {have}"
            )
    return True


# -- the lane's own account ------------------------------------------------------------------------


def lane_key(entry: Mapping[str, Any], base: str, home: str) -> str | None:
    """The lane's private key file: the entry's ``ssh_key`` (``~/`` and relative to the config's folder), else
    ``~/.ssh/config``'s ``IdentityFile`` for the host (as the lane's OpenSSH client takes it)."""
    from observe.devices.lane_nodes import _ssh_config

    value = entry.get("ssh_key")
    if not (isinstance(value, str) and value):
        alias = str(entry.get("host") or "").rpartition("@")[2]
        value = _ssh_config(os.path.join(home, ".ssh", "config"), alias).get("IdentityFile")
    if not value:
        return None
    if value.startswith("~/"):
        value = home + value[1:]
    return value if os.path.isabs(value) else os.path.join(base, value)


def _lane_probe(
    node: Node, key: str | None, entry: dict[str, Any], uuid: str | None
) -> tuple[dict[str, Any] | None, str | None]:
    """The probe's answer as the lane account (logged in with ``key``), or why there is none."""
    from observe.devices.remote import CONNECT_TIMEOUT, ObserverKey, Refused, connect

    if key is None:
        return None, "the config names no ssh_key for the lane (and ~/.ssh/config no IdentityFile)"
    try:
        with open(key, encoding="utf-8", errors="surrogateescape") as f:
            text = f.read(1 << 16)
    except OSError as exc:
        return None, f"cannot read the lane's ssh_key {key}: {exc.strerror or exc}"
    facts: dict[str, Any] = {}
    try:
        transport = connect(replace(node, user=node.lane_user), facts, ObserverKey("file", key, text))
    except Refused as exc:
        if exc.reason == "login-refused":
            return None, f"login-refused: {node.lane_user}@{node.address} refused the lane's ssh_key {key}"
        return None, f"{exc.reason}: {exc.detail}"
    except Exception as exc:  # noqa: BLE001 - said in the row
        return None, f"unreachable: {type(exc).__name__}: {exc}"
    try:
        python = str(entry.get("python") or "python3")
        root = str(entry.get("remote_root") or "")
        env = _str_map(entry.get("node_env"))
        words = [python, "-c", PROBE, root or ".", *([uuid] if uuid else [])]
        prefix = ["env", *(f"{k}={v}" for k, v in sorted(env.items()))] if env else []
        channel = transport.open_session(timeout=CONNECT_TIMEOUT)
        channel.settimeout(60.0)
        channel.exec_command(shlex.join([*prefix, *words]))
        out, err = b"", b""
        stream, errs = channel.makefile("rb"), channel.makefile_stderr("rb")
        out = stream.read(PROBE_MAX)
        err = errs.read(PROBE_MAX)
        status = channel.recv_exit_status()
    except Exception as exc:  # noqa: BLE001 - said in the row
        return None, f"the probe did not answer: {type(exc).__name__}: {exc}"
    finally:
        transport.close()
    said = err.decode("utf-8", "replace").strip()[-500:]
    if status == Exit.NOT_FOUND:
        return None, f"no {python} on the node as the lane account (exit 127{': ' + said if said else ''})"
    try:
        answer = json.loads(out)
    except ValueError:
        return None, f"{python} exited {status}: {said or 'no output'}"
    return (answer if isinstance(answer, dict) else None), None


def _lane_rows(report: NodeReport, node: Node, key: str | None, entry: dict[str, Any], uuid: str | None) -> None:
    answer, why = _lane_probe(node, key, entry, uuid)
    if answer is None:
        report.add("lane login", f"{node.lane_user} with {key}", why)
        return
    report.add("lane python", f"{answer.get('executable')} {answer.get('python')} as {answer.get('user')}")
    torch = answer.get("torch") or {}
    if "error" in torch:
        report.add(
            "lane torch",
            "missing",
            f"the roles' runtime cannot be imported: {torch['error']} (the config's python and node_env, "
            "e.g. its PYTHONPATH)",
        )
    elif not torch.get("available"):
        sees = f"the bound GPU {uuid}" if uuid else "a CUDA device"
        report.add(
            "lane torch", f"torch {torch.get('version')}, CUDA {torch.get('cuda')}", f"torch does not see {sees}"
        )
    else:
        report.add(
            "lane torch", f"torch {torch.get('version')}, CUDA {torch.get('cuda')}, {torch.get('devices')} device(s)"
        )
    root = entry.get("remote_root")
    if not root:
        report.add("remote_root", "not set", "the config names no remote_root for this node")
        return
    if answer.get("writable"):
        report.add("remote_root", f"{root} writable")
    else:
        report.add("remote_root", str(root), f"not writable by {answer.get('user')}: {answer.get('write_error')}")
    free = answer.get("free")
    from observe.util.formatting import size

    if isinstance(free, int):
        report.add(
            "free disk",
            size(free),
            None if free >= MIN_FREE_BYTES else f"{size(free)} free under {root}, less than {size(MIN_FREE_BYTES)}",
        )
    else:
        report.add("free disk", "unknown", f"cannot read the free space under {root}")


# -- the whole config ------------------------------------------------------------------------------


def check_config(
    name: str,
    path: str,
    env: Mapping[str, str],
    *,
    observer_key: ObserverKey | None = None,
    home: str | None = None,
) -> Report:
    """Check every remote node of the lane config at ``path`` (``name``: the variable or the path given).

    ``observer_key``: the key the observer logs in with (None: none, as a recording without one: the node
    is then refused, ``no-key``). Raises :class:`ConfigUnusable` when nothing can be checked.
    """
    real = os.path.realpath(path)
    try:
        with open(real, "rb") as f:
            data = f.read(1 << 20)
    except OSError as exc:
        raise ConfigUnusable(f"{name}: cannot read {path}: {exc.strerror or exc}") from None
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise ConfigUnusable(f"{name}: {path} is not JSON: {exc}") from None
    home = home if home is not None else (env.get("HOME") or os.path.expanduser("~"))
    if isinstance(doc, dict):
        try:
            role_binding(doc)
        except MinorBoundTwice as exc:
            raise MinorBoundTwice(f"{name}: {exc}") from None
        except LaneConfigProblem:
            pass  # its nodes' problems are listed below, as the lane would meet them
    nodes, wrong = lane_nodes(doc, os.path.dirname(real), home)
    report = Report(config=f"{name} ({real})" if name != path else real, config_problems=list(wrong))
    if not isinstance(doc, dict):
        return report
    if not nodes and not wrong:
        raise ConfigUnusable(f"{name}: {path} names no remote node (host absent or local): nothing to reach")
    if not nodes:
        return report
    entries = node_entries(doc)  # lane_nodes read it already: no LaneConfigProblem here
    key_base = os.path.dirname(real)

    def one(node: Node) -> NodeReport:
        entry = _entry_of(doc, entries, node.roles)
        minors = _minors(doc, node.roles)
        row = NodeReport(f"{node.host} port {node.port}")
        start, lost = _observe(node, env, observer_key)
        if lost is not None:
            row.add("observer run", "lost", f"the node was lost after its start observation: {lost}")
        if _observer_rows(row, node, start, minors):
            _lane_rows(row, node, lane_key(entry, key_base, home), entry, _bound_uuid(start, minors))
        else:  # the lane's login would meet the same node and key
            row.add("lane login", "not tried: the node was not reached with a verified host key")
        return row

    # One node after the other (a recording connects side by side): the check's own observer session on one
    # node must not be seen as another root session by the next, where two "nodes" are one machine.
    report.nodes.extend(one(node) for node in nodes)
    return report


def _bound_uuid(start: dict[str, Any] | None, minors: list[tuple[str, int]]) -> str | None:
    """The UUID the observer saw at the first minor the config binds on the node (None: none seen)."""
    gpus = {g.get("minor"): g.get("uuid") for g in (start or {}).get("gpus") or [] if isinstance(g, dict)}
    return next((str(gpus[m]) for _role, m in minors if gpus.get(m)), None)
