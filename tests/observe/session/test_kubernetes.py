"""docs/NODES.md's "Fleet sessions under Kubernetes": the Job's manifest validated as written against Kubernetes'
own schemas (kubernetes-validate, offline), and the pod's command line run as written as a session member on this
machine. No cluster runs here (no registry for kind's or k3s's images): the launcher's ``kubectl`` lines are not run.

The pod is stood in for by a process: its environment as the downward API (``spec.nodeName``) and the config map
would set it, its volumes (``/keys``, ``/fleet``) local folders, uid 1000 the suite's lane account's, and its
training (``./train.sh``) tests/helpers/node_key_probe.py, which tries to take the node's key and must find it
nowhere."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from aos.signing import generate_keypair, load_public_key
from tests.helpers.key_reach import assert_out_of_reach, fill, lane_scratch, probe_training
from tests.helpers.paths import ROOT
from tests.helpers.run import ALPHA, child_env
from tests.helpers.sshd import as_lane, lane_account

SECTION = "## Fleet sessions under Kubernetes"
#: The Kubernetes release whose schemas the manifest is checked against (kubernetes-validate bundles them).
VERSION = "1.33.0"


def _section() -> str:
    text = (ROOT / "docs" / "NODES.md").read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    end = section.find("\n## ", 1)
    return section if end < 0 else section[:end]


def _manifest() -> dict[str, Any]:
    import yaml

    (body,) = re.findall(r"```yaml\n(.*?)```", _section(), flags=re.S)
    doc = yaml.safe_load(body)
    assert isinstance(doc, dict)
    return doc


def _container(manifest: dict[str, Any]) -> dict[str, Any]:
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


class TestTheManifest:
    """The page's Job, as written, is one Kubernetes accepts, and says what the page says it does."""

    def test_it_validates_against_the_schemas(self) -> None:
        """kubernetes-validate (strict: no field the schema does not know) accepts it as a batch/v1 Job."""
        import kubernetes_validate

        manifest = _manifest()
        assert "1.33" == kubernetes_validate.validate(manifest, VERSION, strict=True)
        assert ("batch/v1", "Job", "Indexed") == (
            manifest["apiVersion"],
            manifest["kind"],
            manifest["spec"]["completionMode"],
        )

    def test_a_wrong_field_is_refused(self) -> None:
        """The forgery the validation must catch: a misspelt field, and a field of the wrong type."""
        import kubernetes_validate

        manifest = _manifest()
        misspelt = copy.deepcopy(manifest)
        misspelt["spec"]["template"]["spec"]["restartPolicyy"] = "Never"
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(misspelt, VERSION, strict=True)
        typed = copy.deepcopy(manifest)
        _container(typed)["securityContext"]["runAsUser"] = "root"
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(typed, VERSION, strict=True)

    def test_the_pod_keeps_the_key_from_the_command(self) -> None:
        """The recorder is the observer (uid 0) and signs from a variable; the training runs as another uid; the
        name comes from the downward API; the keys from the node's own folder, read-only; pods run once."""
        manifest = _manifest()
        pod = manifest["spec"]["template"]["spec"]
        container = _container(manifest)
        assert "Never" == pod["restartPolicy"]
        assert 0 == container["securityContext"]["runAsUser"]
        line = container["command"][2]
        assert "--sign-key-env ALPHA_NODE_KEY" in line
        assert "--sign-key " not in line
        assert re.search(r"-- setpriv --reuid=([1-9]\d*) --regid=([1-9]\d*) --clear-groups ", line)
        env = {e["name"]: e for e in container["env"]}
        assert "spec.nodeName" == env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"]
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["keys"]["readOnly"] is True
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert "/etc/alpha-observe" == volumes["keys"]["hostPath"]["path"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the pod's recorder is the observer (root), its training another uid")
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="no setpriv (util-linux) here")
def test_the_pods_command_runs_as_a_session_member(tmp_path: Path) -> None:
    """The container's command line, as written, is node-0's recorder in a session: node-0 is proven by its
    declared key, and its training, run as the lane account, found the key in neither the key file, its own
    environment, nor its recorder's environment or memory."""
    with lane_scratch("aos-k8s-pod-") as lane_folder:  # the training's: the probe and its report
        _run_the_pod(tmp_path, lane_folder)


def _run_the_pod(tmp_path: Path, lane_folder: Path) -> None:
    manifest = _manifest()
    container = _container(manifest)
    keys = tmp_path / "keys"  # the node's /etc/alpha-observe: root's, 0700, its key 0600
    keys.mkdir(mode=0o700)
    generate_keypair(keys / "node-0")
    generate_keypair(tmp_path / "session")
    assert 0o600 == (keys / "node-0.key").stat().st_mode & 0o777
    fleet = tmp_path / "fleet"  # the shared volume
    fleet.mkdir()
    train = probe_training(lane_folder, keys / "node-0.key")
    account = lane_account()
    assert ["sh", "-c"] == container["command"][:2]
    line = fill(
        container["command"][2],
        [
            ('"/keys/', f'"{keys}/'),
            ("--reuid=1000 --regid=1000", f"--reuid={account.pw_uid} --regid={account.pw_gid}"),
            ("./train.sh", train),
        ],
    )
    env = {e["name"]: e for e in container["env"]}
    fleet_dir = fill(env["ALPHA_FLEET_DIR"]["value"], [("/fleet/", f"{fleet}/")])
    assert {"name": "alpha-session", "key": "origin"} == env["ALPHA_FLEET_ORIGIN"]["valueFrom"]["configMapKeyRef"]
    # the pod: the downward API's node name, the shared folder, the config map's origin (the session's own,
    # which the launcher puts there), in the container's working folder
    workdir = lane_folder / "srv-train"
    workdir.mkdir()
    as_lane(workdir)
    pod = tmp_path / "pod.sh"
    pod_env = f"NODE_NAME=node-0 ALPHA_FLEET_DIR={fleet_dir}"
    pod.write_text(f"#!/bin/sh\ncd {workdir}\n{pod_env} exec sh -c {shlex.quote(line)}\n")
    pod.chmod(0o755)
    spec = tmp_path / "fleet-k8s.json"
    spec.write_text(
        json.dumps({"origin": "example.com/k8s", "members": [{"name": "node-0", "key": "keys/node-0.pub"}]})
    )
    env_run = child_env({"PATH": f"{Path(ALPHA).parent}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)})
    run = subprocess.run(
        [ALPHA, "observe", "session", "run", str(spec), "--dir", fleet_dir, "--sign-key", "session.key", "--quiet",
         "--", str(pod)],
        cwd=tmp_path, env=env_run, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert 0 == run.returncode, (run.stdout, run.stderr)
    verify = subprocess.run(
        [ALPHA, "observe", "session", "verify", fleet_dir, "--key", "session.pub"],
        cwd=tmp_path, env=env_run, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert 0 == verify.returncode, (verify.stdout, verify.stderr)
    assert "1 proven, 0 did not run or not proven" in verify.stdout
    from observe.session.verify import verify_session

    verdict = verify_session(Path(fleet_dir), load_public_key(tmp_path / "session.pub"))
    assert {"node-0": load_public_key(keys / "node-0.pub").key_id} == {
        m.path: m.key_id for m in verdict.members if m.status == "proven"
    }
    assert_out_of_reach(lane_folder, "node-0")
