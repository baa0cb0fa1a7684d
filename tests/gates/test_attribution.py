"""devices-observed ties GPU processes to roles by what they execute, and the device gates compare captured bytes.

Each test starts from ``gates.testing.device_lane`` (a right lane: each role's
process is listed with the SHA-256 of its executable, as the recorder reads it
from ``/proc/PID/exe``), changes what a hostile lane could change, and checks
the verdict. Every one of these passed before attribution by identity.
"""

from __future__ import annotations

from typing import Any

from gates.testing import SyntheticStream, device_lane, sha256
from tests.gates.test_mutants import reason_of, requalify, sample, status_of

ALPHA_GPU, BETA_GPU = "GPU-0000-alpha", "GPU-0001-beta"


def _procs(lane: SyntheticStream) -> list[dict[str, Any]]:
    procs: list[dict[str, Any]] = sample(lane)["attrs"]["processes"]
    return procs


def _role_process(lane: SyntheticStream, role: str) -> dict[str, Any]:
    return next(p for p in _procs(lane) if p["exe"]["path"].endswith(role) and p["used_memory"] > 400 << 20)


def _helper(pid: int, gpu: str, exe: bytes, *, path: str, argv: list[str]) -> dict[str, Any]:
    return {
        "pid": pid,
        "gpu": gpu,
        "used_memory": 600 << 20,
        "in_tree": True,
        "steps": ["uninterrupted-run"],
        "exe": {"path": path, "sha256": sha256(exe)},
        "script": None,
        "argv": argv,
    }


class TestAttributionByIdentity:
    def test_right_lane_passes_naming_each_role(self) -> None:
        """The right lane passes physical; the reason names each role's own process on its GPU."""
        v = device_lane().evaluate()
        assert ("pass", "physical") == (v.verdict, v.scope)
        reason = reason_of(v, "devices-observed")
        assert f"GPU {ALPHA_GPU} ran alpha's pid 200" in reason
        assert f"GPU {BETA_GPU} ran beta's pid 201" in reason

    def test_renamed_copy_of_a_role_on_the_wrong_gpu(self) -> None:
        """alpha started as `exec -a worker` of a renamed copy, on beta's GPU: same digest, so wrong GPU: fail."""
        lane = device_lane()
        alpha = _role_process(lane, "alpha")
        alpha.update(gpu=BETA_GPU, argv=["worker", "serve"])
        alpha["exe"]["path"] = "/tmp/w/worker"
        _procs(lane)[:] = [p for p in _procs(lane) if p["used_memory"] > 400 << 20]
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "devices-observed"))
        assert f"alpha's pid 200 (worker: exe sha256 {alpha['exe']['sha256'][:12]}) worked on GPU {BETA_GPU}" in (
            reason_of(v, "devices-observed")
        )

    def test_helper_of_the_tree_holding_the_idle_gpu(self) -> None:
        """beta's work moved to alpha's GPU by a helper; a helper of the tree holds beta's GPU: inconclusive."""
        lane = device_lane()
        procs = _procs(lane)
        procs[:] = [p for p in procs if p["pid"] != 201]
        procs.append(_helper(300, BETA_GPU, b"helper", path="/lane/tools/hold.py", argv=["python3", "out/build/beta"]))
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "devices-observed"))
        reason = reason_of(v, "devices-observed")
        assert "pid 300 (hold.py: exe sha256" in reason
        assert "what it executes is no role's captured executable: unattributable" in reason
        assert f"beta's own process (running its captured executable) was not seen on its bound GPU {BETA_GPU}" in (
            reason
        )

    def test_argv_rewritten_with_exec_a_is_ignored(self) -> None:
        """Every argv rewritten (`exec -a worker`, no path at all): attribution, and the pass, are unchanged."""
        lane = device_lane()
        for p in _procs(lane):
            p["argv"] = ["worker"]
        v = lane.evaluate()
        assert ("pass", "pass") == (v.verdict, status_of(v, "devices-observed"))

    def test_argv_naming_a_role_does_not_make_a_role(self) -> None:
        """A different executable given alpha's name and path (argv and exe path) on alpha's GPU is not alpha."""
        lane = device_lane()
        procs = _procs(lane)
        procs[:] = [p for p in procs if p["pid"] != 200]
        procs.append(
            _helper(
                300, ALPHA_GPU, b"not alpha", path="/srv/lane/remote/alpha", argv=["/srv/lane/remote/alpha", "serve"]
            )
        )
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "devices-observed"))
        reason = reason_of(v, "devices-observed")
        assert "pid 300 (alpha: exe sha256" in reason
        assert "unattributable" in reason
        assert "alpha's own process (running its captured executable) was not seen" in reason

    def test_interpreter_known_by_its_held_script(self) -> None:
        """A role run by an interpreter is its role by the script it holds; on the wrong GPU: fail."""
        lane = device_lane()
        alpha = _role_process(lane, "alpha")
        alpha["script"] = dict(alpha["exe"])
        alpha["exe"] = {"path": "/usr/bin/python3.11", "sha256": sha256(b"python")}
        right = lane.evaluate()
        alpha["gpu"] = BETA_GPU
        _procs(lane)[:] = [p for p in _procs(lane) if p["used_memory"] > 400 << 20]
        wrong = lane.evaluate()
        assert ("pass", "fail") == (status_of(right, "devices-observed"), status_of(wrong, "devices-observed"))
        assert "alpha's pid 200 (python3.11 alpha: exe sha256" in reason_of(wrong, "devices-observed")

    def test_role_executable_not_captured(self) -> None:
        """A role whose executables were not captured cannot be recognised: inconclusive, naming it."""
        lane = device_lane()
        lane.drop(o for o in lane.ops if o["kind"].startswith("artifact") and o["attrs"]["path"].endswith("/beta"))
        requalify(lane)
        v = lane.evaluate()
        assert "inconclusive" == status_of(v, "devices-observed")
        assert "no captured executable of beta" in reason_of(v, "devices-observed")

    def test_recorded_before_attribution_by_identity(self) -> None:
        """Observations without the identity facts (an older recorder) are inconclusive, saying why."""
        lane = device_lane()
        for o in lane.find("device.observed"):
            del o["attrs"]["namespace"]
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "devices-observed"))
        assert reason_of(v, "devices-observed").startswith("recorded before attribution by identity")


class TestSharedGpus:
    def test_unexplained_memory_above_the_idle_level(self) -> None:
        """Memory on a bound GPU that no listed process explains, above 768 MiB: shared, inconclusive."""
        lane = device_lane()
        start = lane.find("device.observed")[0]
        start["attrs"]["namespace"].update(pid="other", markers=["/.dockerenv"])
        start["attrs"]["gpus"][1]["unexplained_memory"] = 1141 << 20
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "devices-observed"))
        reason = reason_of(v, "devices-observed")
        assert f"bound GPU {BETA_GPU} was shared: 1141 MiB in use that no listed process explains" in reason
        assert "PID namespace: other, container markers: /.dockerenv" in reason

    def test_memory_at_the_idle_level_is_not_shared(self) -> None:
        """Up to the idle level (an idle H200 reports 615 MiB in use) is no tenant: the pass stands."""
        lane = device_lane()
        for o in lane.find("device.observed"):
            for g in o["attrs"]["gpus"]:
                g["unexplained_memory"] = 768 << 20
        assert "pass" == status_of(lane.evaluate(), "devices-observed")

    def test_unexplained_utilisation(self) -> None:
        """A bound GPU busy while listing no process: shared, inconclusive."""
        lane = device_lane()
        lane.find("device.observed")[-1]["attrs"]["gpus"][0]["unexplained_utilization"] = 35
        v = lane.evaluate()
        assert "inconclusive" == status_of(v, "devices-observed")
        assert f"bound GPU {ALPHA_GPU} was shared: 35% utilisation while it listed no process" in (
            reason_of(v, "devices-observed")
        )


class TestCapturedBytes:
    def test_right_lane_compares_bytes(self) -> None:
        """Both byte comparisons pass on the right lane, the oracle's digests."""
        v = device_lane("coordinate-device").evaluate()
        assert ("pass", "pass") == (status_of(v, "checkpoints-captured"), status_of(v, "trajectories-captured"))

    def test_receipt_claims_equal_trajectories_over_different_files(self) -> None:
        """The host-shadow receipt says the trajectories are equal; the captured files differ: fail."""
        lane = device_lane("coordinate-device")
        lane.set_artifact("out/shadow/trajectory.json", b'{"rows": "other"}\n')
        requalify(lane)
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "trajectories-captured"))
        assert "the captured files differ" in reason_of(v, "trajectories-captured")
        assert "host-shadow-control.shadow_trajectory (out/shadow/trajectory.json)" in reason_of(
            v, "trajectories-captured"
        )

    def test_receipt_digest_of_the_plain_run_unbound(self) -> None:
        """The host-shadow receipt's digest of the plain run's checkpoint names other bytes than captured: fail."""
        lane = device_lane("coordinate-device")
        other = sha256(b"other checkpoint")
        lane.fields("host-shadow-control").update(checkpoint_sha256=other)
        v = lane.evaluate()
        assert "fail" == status_of(v, "checkpoints-captured")
        assert "host-shadow-control.checkpoint_sha256 (seq" in reason_of(v, "checkpoints-captured")

    def test_consistent_checkpoints_that_are_not_the_oracles(self) -> None:
        """Every checkpoint the same bytes and every receipt agreeing, but not the oracle's: fail on the pin."""
        lane = device_lane("independent-device")
        data = b"a consistent but wrong checkpoint\n"
        for path in ("uninterrupted/checkpoint.bin", "split/checkpoint.bin", "shadow/checkpoint.bin"):
            lane.set_artifact(f"out/{path}", data)
        for name, key in (
            ("uninterrupted-run", "checkpoint_sha256"),
            ("split-run", "resumed_checkpoint_sha256"),
            ("host-shadow-control", "checkpoint_sha256"),
            ("host-shadow-control", "shadow_checkpoint_sha256"),
            ("fresh-evaluation", "checkpoint_sha256"),
        ):
            lane.fields(name)[key] = sha256(data)
        requalify(lane)
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "checkpoints-captured"))
        assert [] == [c.name for c in v.checks if c.status == "fail" and c.name != "checkpoints-captured"]
        assert "not the pinned" in reason_of(v, "checkpoints-captured")
