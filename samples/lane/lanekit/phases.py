"""The qualification sequence, one function per step of docs/GATES.md "Lane receipts".

Each phase runs inside its ``alpha observe step`` span (the lane script wraps
it), does the work, captures every file it produced and emits its receipts.
A phase returns its exit code: 0 when it did its work and the result held,
non-zero otherwise; a refusal control returns the refused role's own exit
code, since the gate compares it with the step's.

Phases hand state to each other only through files under OUT. Where the roles
run (this machine, or nodes over SSH) is a :class:`lanekit.placement.Placement`
of the config: it uploads, checks SHA-256 there, runs and copies back.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from . import checkpoint
from .build import build_role, check_executable, sha256_file
from .config import ConfigError, load_config, owner_count, read_json, write_json
from .device import host_binding
from .placement import Placement
from .preflight import preflight
from .receipts import artifact, captured, receipt, rel
from .spec import default_spec, owners_of

__all__ = ["PHASES", "ConfigError", "load_config"]

WRONG_UUID = "GPU-00000000-0000-0000-0000-000000000000"
EVALUATOR = "owner-0"  # evaluates on its GPU, for every lane


def _files_under(folder: str) -> list[str]:
    found = []
    for root, _dirs, files in os.walk(folder):
        found += [os.path.join(root, f) for f in files]
    return sorted(found)


def _oracle() -> Any:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, here)
    try:
        import oracle
    finally:
        sys.path.pop(0)
    return oracle


def _matches_oracle(lane: str, ckpt_path: str, steps: int, owners: int) -> tuple[bool, str]:
    """Compare a checkpoint's state with the oracle's for ``owners`` roles, bit for bit (as hex floats)."""
    step, chunks = checkpoint.load(ckpt_path)
    expected = _oracle().trajectory(lane, steps, owners)[-1]
    got = {k: [v.hex() for v in vals] for k, vals in chunks.items()}
    want = {k: [v.hex() for v in vals] for k, vals in expected.items()}
    if step == steps and got == want:
        return True, f"step {step} state equals the oracle's bit for bit"
    return False, f"step {step} state {got} differs from the oracle's step {steps} state {want}"


def _paths(out: str, lane: str) -> dict[str, str]:
    return {
        "static": os.path.join(out, "static"),
        "build": os.path.join(out, "build"),
        "binding": os.path.join(out, "binding.json"),
        "config": os.path.join(out, "lane-config.json"),
    }


def _executables(folder: str, owners: int) -> dict[str, str]:
    return {role: os.path.join(folder, f"{role}.pyz") for role in owners_of(owners)}


def _run_files(folder: str) -> dict[str, str]:
    return {name: os.path.join(folder, f"{name}.json") for name in ("checkpoint", "trajectory", "membership")}


def _run(place: Placement, exes: dict[str, str], label: str, folder: str, **kwargs: Any) -> tuple[bool, dict[str, str]]:
    result, files = place.run(exes, label, folder, **kwargs)
    artifact(*[f for f in files.values() if os.path.exists(f)])
    return result.ok and all(os.path.exists(f) for f in files.values()), files


def _owners_report(membership_path: str, physical: bool) -> tuple[bool, str]:
    owners = read_json(membership_path)["owners"]
    kinds = [o["backend"]["kind"] for o in owners]
    ok = all(o["resident"] for o in owners) and (not physical or all(k == "gpu" for k in kinds))
    return ok, f"owner state resident in {', '.join(kinds)} memory"


# -- static half ------------------------------------------------------------------


def static_build(lane: str, out: str, config: str | None = None) -> int:
    """Build every role's executable (host binding: the static half runs everywhere); the roles the config
    binds, two without one."""
    spec = default_spec(lane, owner_count(config))
    folder = _paths(out, lane)["static"]
    for role in spec.owners:
        path, digest = build_role(spec, role, host_binding(), folder)
        artifact(path, f"{path}.sha256")
        receipt("static-build", "pass", role=role, target=rel(path), sha256=digest, lane=lane)
    return 0


def static_check(lane: str, out: str, config: str | None = None) -> int:
    """Check every built executable: integrity, embedded manifest, self-test."""
    folder = _paths(out, lane)["static"]
    ok = True
    for role, path in _executables(folder, owner_count(config)).items():
        digest = sha256_file(path) if os.path.exists(path) else ""
        for result in check_executable(path, role=role, lane=lane):
            ok = ok and result["result"] == "pass"
            receipt(
                "static-check",
                result["result"],
                role=role,
                check=result["check"],
                result=result["result"],
                target=rel(path),
                sha256=digest,
                detail=result["detail"],
            )
    return 0 if ok else 1


# -- physical half ----------------------------------------------------------------


def _bindings(out: str, lane: str) -> dict[str, dict[str, Any]]:
    roles: dict[str, dict[str, Any]] = read_json(_paths(out, lane)["binding"])["roles"]
    return roles


def build(lane: str, out: str, config_path: str | None = None) -> int:
    """Build every role with its device binding, check it, upload it, compare SHA-256 on both sides."""
    config = load_config(str(config_path))
    paths = _paths(out, lane)
    spec = default_spec(lane, len(config["minors"]))
    ok = True
    with Placement(config, lane, out) as place:
        for role, binding in ((r, _bindings(out, lane)[r]) for r in spec.owners):
            path, local = build_role(spec, role, binding, paths["build"])
            artifact(path, f"{path}.sha256")
            checks = check_executable(path, role=role, lane=lane)
            remote, remote_sha = place.upload(path, role)
            good = local == remote_sha and all(c["result"] == "pass" for c in checks)
            ok = ok and good
            receipt(
                "build",
                "pass" if good else "fail",
                role=role,
                target=rel(path),
                sha256_local=local,
                sha256_remote=remote_sha,
                remote=remote,
                node=place.where(role),
                binding=binding,
                checks={c["check"]: c["result"] for c in checks},
            )
    return 0 if ok else 1


def _wrong(good: dict[str, Any], control: str) -> dict[str, Any]:
    """A role's binding made wrong for ``control``: another UUID, or another product."""
    if control == "wrong-uuid":
        return dict(good, uuid=WRONG_UUID if good["uuid"] != WRONG_UUID else WRONG_UUID[:-1] + "1")
    other = "NVIDIA GeForce RTX 3090" if good["product"] != "NVIDIA GeForce RTX 3090" else "NVIDIA GeForce RTX 3070"
    return dict(good, product=other)


def _refused_run(
    place: Placement, exes: dict[str, str], role: str, path: str, control: str, run_dir: str
) -> dict[str, Any]:
    """One run with ``role``'s executable replaced by ``path`` (built wrong): what the refused role did."""
    place.upload(path, role)
    result, files = place.run({**exes, role: path}, f"refusal-{control}", run_dir, updates=5, epoch=1, timeout=120)
    code = result.exit_codes[role]
    stderr = result.output.get(role, "")
    name = next((line.split(":")[1].strip() for line in stderr.splitlines() if line.startswith("refused: ")), "")
    produced = _files_under(run_dir) if os.path.isdir(run_dir) else []
    if produced:
        artifact(*produced)
    # Output: files the run wrote, and whatever the refused executable (and, for owner-0, the coordinator it
    # hosts) printed on stdout.
    printed = sum(
        len(result.stdout.get(p, "").encode()) for p in (role, *(["coordinator"] if role == "owner-0" else []))
    )
    return {
        "role": role,
        "exit_code": code,
        "exit_name": name,
        "checkpoint_written": os.path.exists(files["checkpoint"]),
        "output_bytes": sum(os.path.getsize(f) for f in produced) + printed,
        "target": rel(path),
    }


def _refusal(lane: str, out: str, config_path: str | None, control: str) -> int:
    """Each role built wrong in turn (owner-0 first, whose exit is the step's) must be refused by name, writing
    nothing; the receipt holds owner-0's run and, in ``roles``, every role's."""
    config = load_config(str(config_path))
    paths = _paths(out, lane)
    spec = default_spec(lane, len(config["minors"]))
    expected = {"wrong-uuid": "device-uuid", "wrong-product": "nvidia-plan-host"}[control]
    folder = os.path.join(out, "refusal", control)
    exes = _executables(paths["build"], len(spec.owners))
    runs = []
    with Placement(config, lane, out) as place:
        for role in spec.owners:
            path, _digest = build_role(spec, role, _wrong(_bindings(out, lane)[role], control), folder)
            artifact(path, f"{path}.sha256")
            run_dir = os.path.join(folder, "run" if role == "owner-0" else f"run-{role}")
            runs.append(_refused_run(place, exes, role, path, control, run_dir))
    first = runs[0]
    held = all(
        r["exit_code"] != 0 and r["exit_name"] == expected and not r["checkpoint_written"] and r["output_bytes"] == 0
        for r in runs
    )
    receipt(
        "refusal-control",
        "pass" if held else "fail",
        control=control,
        expected=expected,
        exit_code=first["exit_code"],
        exit_name=first["exit_name"],
        checkpoint_written=any(r["checkpoint_written"] for r in runs),
        output_bytes=sum(r["output_bytes"] for r in runs),
        target=first["target"],
        roles=runs,
    )
    code = int(first["exit_code"])
    if code != 0 and not held:
        print(f"{control}: not every role was refused: {runs}", file=sys.stderr)
    return code if code != 0 else 1


def refusal_wrong_uuid(lane: str, out: str, config_path: str | None = None) -> int:
    """A role built for the wrong UUID must exit ``device-uuid`` and write nothing."""
    return _refusal(lane, out, config_path, "wrong-uuid")


def refusal_wrong_product(lane: str, out: str, config_path: str | None = None) -> int:
    """A role built for the wrong product must exit ``nvidia-plan-host`` and write nothing."""
    return _refusal(lane, out, config_path, "wrong-product")


def uninterrupted(lane: str, out: str, config_path: str | None = None) -> int:
    """Five updates from fresh processes; the checkpoint must equal the oracle's."""
    config = load_config(str(config_path))
    owners = len(config["minors"])
    exes = _executables(_paths(out, lane)["build"], owners)
    with Placement(config, lane, out) as place:
        ran, files = _run(place, exes, "uninterrupted-run", os.path.join(out, "uninterrupted"), updates=5, epoch=1)
    ok, detail = _matches_oracle(lane, files["checkpoint"], 5, owners) if ran else (False, "the run did not finish")
    resident, where = _owners_report(files["membership"], True) if ran else (False, "")
    good = ok and resident
    receipt(
        "uninterrupted-run",
        "pass" if good else "fail",
        updates=5,
        checkpoint=rel(files["checkpoint"]),
        checkpoint_sha256=sha256_file(files["checkpoint"]) if ran else None,
        trajectory=rel(files["trajectory"]),
        oracle=detail,
        state=where,
    )
    return 0 if good else 1


def split(lane: str, out: str, config_path: str | None = None) -> int:
    """Three updates, a checkpoint, two more in fresh processes at membership epoch 2."""
    config = load_config(str(config_path))
    owners = len(config["minors"])
    exes = _executables(_paths(out, lane)["build"], owners)
    with Placement(config, lane, out) as place:
        ran1, before = _run(place, exes, "split-run.before", os.path.join(out, "split", "before"), updates=3, epoch=1)
        ran2, after = False, _run_files(os.path.join(out, "split", "after"))
        if ran1:
            ran2, after = _run(
                place,
                exes,
                "split-run.after",
                os.path.join(out, "split", "after"),
                updates=2,
                epoch=2,
                resume=before["checkpoint"],
                resume_membership=before["membership"],
            )
    findings: list[str] = []
    ok = ran1 and ran2
    if ok:
        for path, steps in ((before["checkpoint"], 3), (after["checkpoint"], 5)):
            same, detail = _matches_oracle(lane, path, steps, owners)
            ok = ok and same
            findings.append(detail)
        reference = os.path.join(out, "uninterrupted", "checkpoint.json")
        equal = os.path.exists(reference) and sha256_file(reference) == sha256_file(after["checkpoint"])
        findings.append("resumed checkpoint " + ("equals" if equal else "differs from") + " the uninterrupted one")
        rows = read_json(before["trajectory"])["rows"] + read_json(after["trajectory"])["rows"]
        ref_rows = read_json(os.path.join(out, "uninterrupted", "trajectory.json"))["rows"]
        same_rows = "equals" if rows == ref_rows else "differs from"
        findings.append(f"split trajectory {same_rows} the uninterrupted one")
        ok = ok and equal and rows == ref_rows
    epoch_before = read_json(before["membership"])["epoch"] if ran1 else None
    epoch_after = read_json(after["membership"])["epoch"] if ran2 else None
    ok = ok and epoch_before == 1 and epoch_after == 2
    receipt(
        "split-run",
        "pass" if ok else "fail",
        updates_before=3,
        updates_after=2,
        checkpoint=rel(after["checkpoint"]),
        resumed_checkpoint_sha256=sha256_file(after["checkpoint"]) if ran2 else None,
        epoch_before=epoch_before,
        epoch_after=epoch_after,
        checkpoint_before=rel(before["checkpoint"]),
        findings=findings,
    )
    return 0 if ok else 1


def host_shadow(lane: str, out: str, config_path: str | None = None) -> int:
    """The run again with the owners' host shadows overwritten before every forward pass."""
    config = load_config(str(config_path))
    owners = len(config["minors"])
    exes = _executables(_paths(out, lane)["build"], owners)
    with Placement(config, lane, out) as place:
        ran, files = _run(
            place, exes, "host-shadow-control", os.path.join(out, "host-shadow"), updates=5, epoch=1, shadow=True
        )
    ref = _run_files(os.path.join(out, "uninterrupted"))
    digests = {
        "trajectory_sha256": sha256_file(ref["trajectory"]),
        "shadow_trajectory_sha256": sha256_file(files["trajectory"]) if ran else None,
        "checkpoint_sha256": sha256_file(ref["checkpoint"]),
        "shadow_checkpoint_sha256": sha256_file(files["checkpoint"]) if ran else None,
    }
    overwrites = [o["shadow_overwrites"] for o in read_json(files["membership"])["owners"]] if ran else []
    resident, where = _owners_report(files["membership"], True) if ran else (False, "")
    ok = (
        ran
        and resident
        and digests["trajectory_sha256"] == digests["shadow_trajectory_sha256"]
        and digests["checkpoint_sha256"] == digests["shadow_checkpoint_sha256"]
        and overwrites == [5] * owners
    )
    receipt(
        "host-shadow-control",
        "pass" if ok else "fail",
        shadow_checkpoint=rel(files["checkpoint"]),
        shadow_trajectory=rel(files["trajectory"]),
        shadow_overwrites=overwrites,
        state=where,
        **digests,
    )
    return 0 if ok else 1


def _evaluator(lane: str, out: str) -> str:
    return os.path.join(_paths(out, lane)["build"], f"{EVALUATOR}.pyz")


def fresh_evaluation(lane: str, out: str, config_path: str | None = None) -> int:
    """A new process (owner-0's executable) evaluates from the resumed checkpoint, on its GPU."""
    config = load_config(str(config_path))
    ckpt = os.path.join(out, "split", "after", "checkpoint.json")
    output = os.path.join(out, "evaluation", "evaluation.json")
    os.makedirs(os.path.dirname(output), exist_ok=True)
    with Placement(config, lane, out) as place:
        code, _stdout, _output = place.evaluate(_evaluator(lane, out), "fresh-evaluation", ckpt, output)
    ok = code == 0 and os.path.exists(output)
    device = "none"
    detail = f"evaluator exited {code}"
    if ok:
        artifact(output)
        body = read_json(output)
        device = str(body["device"]["kind"])
        checkpoint.load(ckpt)  # the resumed checkpoint still verifies
        owners = len(config["minors"])
        expected = _oracle().evaluation(lane, _oracle().trajectory(lane, 5, owners)[-1], owners)
        got = {k: v for k, v in body["result"].items() if k != "resident"}
        same = got == expected and body["checkpoint_sha256"] == sha256_file(ckpt)
        detail = "evaluation equals the oracle's bit for bit" if same else f"evaluation {got} differs from {expected}"
        ok = same and device == "gpu"
    receipt(
        "fresh-evaluation",
        "pass" if ok else "fail",
        device=device,
        checkpoint=rel(ckpt),
        checkpoint_sha256=sha256_file(ckpt) if os.path.exists(ckpt) else None,
        output=rel(output),
        oracle=detail,
    )
    return 0 if ok else 1


def corrupted(lane: str, out: str, config_path: str | None = None) -> int:
    """A corrupted copy of the resumed checkpoint must be refused (``checkpoint-chunk``)."""
    config = load_config(str(config_path))
    source = os.path.join(out, "split", "after", "checkpoint.json")
    folder = os.path.join(out, "corrupted")
    os.makedirs(folder, exist_ok=True)
    bad = os.path.join(folder, "checkpoint.json")
    with open(source, "rb") as fh:
        data = checkpoint.corrupt_bytes(fh.read())
    with open(bad, "wb") as fh:
        fh.write(data)
    artifact(bad)
    output = os.path.join(folder, "evaluation.json")
    with Placement(config, lane, out) as place:
        code, stdout, printed = place.evaluate(_evaluator(lane, out), "corrupted-checkpoint", bad, output)
    name = next((line.split(":")[1].strip() for line in printed.splitlines() if line.startswith("refused: ")), "")
    wrote = os.path.exists(output)
    if wrote:
        artifact(output)
    held = code != 0 and name == "checkpoint-chunk" and not wrote and not stdout
    receipt(
        "corrupted-checkpoint",
        "pass" if held else "fail",
        exit_code=code,
        exit_name=name,
        checkpoint=rel(bad),
        output_written=wrote,
    )
    return code if code != 0 else 1


def qualification(lane: str, out: str, config_path: str | None = None) -> int:
    """Write qualification.json naming the SHA-256 of every file the lane produced."""
    target = os.path.join(out, "qualification.json")
    files = [f for f in _files_under(out) if os.path.abspath(f) != os.path.abspath(target)]
    entries = [{"path": os.path.relpath(f, out), "sha256": sha256_file(f)} for f in files]
    digest = write_json(target, {"lane": lane, "files": entries})
    done = captured()
    missing = [f for f in files if rel(f) not in done]
    artifact(*missing, target)
    receipt("qualification", "pass", path=rel(target), sha256=digest, files=len(entries))
    return 0


PHASES = {
    "static-build": static_build,
    "static-check": static_check,
    "preflight": preflight,
    "build": build,
    "refusal-wrong-uuid": refusal_wrong_uuid,
    "refusal-wrong-product": refusal_wrong_product,
    "uninterrupted-run": uninterrupted,
    "split-run": split,
    "host-shadow-control": host_shadow,
    "fresh-evaluation": fresh_evaluation,
    "corrupted-checkpoint": corrupted,
    "qualification": qualification,
}
