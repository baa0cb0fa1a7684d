"""Mutant tests for the device gates, on synthetic streams: one thing wrong at a time.

Each test starts from ``gates.testing.device_lane`` (a right lane), breaks
exactly one thing, and checks that the verdict is not a pass and that the
rule meant to notice names it.
"""

from __future__ import annotations

import json

import pytest

from gates.testing import DEVICE_CONFIG_VARS, SyntheticStream, device_lane, observed_gpu, sha256
from gates.verdict import Verdict

DEVICE_GATES = sorted(DEVICE_CONFIG_VARS)

#: Where device_lane's recorder captured the lane config (the path its variable names).
RECORDED_CONFIG = "/etc/alpha/lane.json"


def status_of(v: Verdict, name: str) -> str:
    """The status of check ``name`` in ``v`` (KeyError if there is no such check)."""
    for c in v.checks:
        if c.name == name:
            return c.status
    raise KeyError(f"no check {name!r} in {[c.name for c in v.checks]}")


def reason_of(v: Verdict, name: str) -> str:
    return next(c.reason for c in v.checks if c.name == name)


def rewrite_json(lane: SyntheticStream, path: str, edit: dict[str, object]) -> None:
    """Replace a captured JSON file's content with ``edit`` applied to it."""
    art = lane.one("artifact", path)
    chunks = [o for o in lane.ops if o["kind"] == "artifact.chunk" and o["attrs"]["path"] == path]
    doc = json.loads(b"".join(c["data"] for c in chunks))
    doc.update(edit)
    lane.set_artifact(path, json.dumps(doc).encode())
    assert art["attrs"]["sha256"] == sha256(json.dumps(doc).encode())
    requalify(lane)


def sample(lane: SyntheticStream) -> dict[str, object]:
    """The one device observation of phase ``sample`` (device_lane's, during the uninterrupted run)."""
    found = [o for o in lane.find("device.observed") if o["attrs"]["phase"] == "sample"]
    assert 1 == len(found)
    return found[0]


def rename_observed(lane: SyntheticStream, name: str) -> None:
    """Every GPU the recorder observed is a ``name``."""
    for o in lane.find("device.observed"):
        for g in o["attrs"]["gpus"]:
            g["name"] = name


def requalify(lane: SyntheticStream) -> None:
    """Rewrite qualification.json (and its receipt) to name the files as now captured."""
    qpath = "out/qualification.json"
    files = []
    for art in lane.find("artifact"):
        path = art["attrs"]["path"]
        if path.startswith("out/") and path not in (qpath, "out/lane-config.json"):
            files.append({"path": path[len("out/") :], "sha256": art["attrs"]["sha256"]})
    data = json.dumps({"lane": "test", "files": files}).encode()
    lane.set_artifact(qpath, data)
    lane.fields("qualification")["sha256"] = sha256(data)


class TestRightLanes:
    @pytest.mark.parametrize("gate", DEVICE_GATES)
    def test_right_physical_lane_passes_with_scope_physical(self, gate: str) -> None:
        """A right lane with its config set passes with scope physical and every check passing."""
        v = device_lane(gate).evaluate()
        assert [] == [c for c in v.checks if c.status != "pass"]
        assert ("pass", "physical") == (v.verdict, v.scope)

    @pytest.mark.parametrize("gate", DEVICE_GATES)
    def test_static_only_lane_passes_with_scope_static(self, gate: str) -> None:
        """With no config set, the static half alone passes with scope static and says the physical lane did not run."""
        v = device_lane(gate, physical=False).evaluate()
        assert ("pass", "static") == (v.verdict, v.scope)
        assert "physical lane did not run" in v.summary
        assert DEVICE_CONFIG_VARS[gate] in v.summary
        assert not any(c.name.startswith("step:preflight") for c in v.checks)

    def test_static_pass_needs_at_least_one_role(self) -> None:
        """A lane that declares no role (no static-build receipt) is not a static pass."""
        lane = device_lane(physical=False)
        lane.drop(lane.find("receipt", "static-build"))
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "receipt:static-build"))

    def test_physical_receipts_without_config_give_only_static_scope(self) -> None:
        """A full lane recorded without its config variable is only a static pass."""
        lane = device_lane()
        lane.ops[0]["attrs"]["env"].pop("ALPHA_PARTITIONED_DEVICE_CONFIG")
        v = lane.evaluate()
        assert ("pass", "static") == (v.verdict, v.scope)


class TestStaticHalf:
    def test_static_check_missing_for_a_role(self) -> None:
        """A role whose static-check never ran leaves the static half inconclusive."""
        lane = device_lane(physical=False)
        lane.drop([lane.receipt_op("static-check", role="beta")])
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "static-roles-checked"))

    def test_static_check_of_other_bytes(self) -> None:
        """A static-check whose sha256 is not its role's static-build sha256 fails."""
        lane = device_lane(physical=False)
        lane.fields("static-check", role="alpha")["sha256"] = sha256(b"something else")
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "static-roles-checked"))

    def test_static_build_receipt_contradicts_captured_target(self) -> None:
        """A static-build sha256 that the captured executable's bytes contradict fails."""
        lane = device_lane(physical=False)
        lane.set_artifact("out/static/alpha", b"other bytes\n")
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "receipt:static-build"))

    def test_static_check_result_fail(self) -> None:
        """A static-check that reports its check failed fails the gate."""
        lane = device_lane(physical=False)
        op = lane.receipt_op("static-check", role="beta")
        op["attrs"]["status"] = "fail"
        op["attrs"]["fields"]["result"] = "fail"
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "receipt:static-check"))

    def test_static_step_failed(self) -> None:
        """A static-build step that exited non-zero fails."""
        lane = device_lane(physical=False)
        lane.one("step.end", "static-build")["attrs"]["exit_code"] = 2
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "step:static-build"))


class TestPhysicalLane:
    def test_config_set_but_physical_lane_missing(self) -> None:
        """With the config set, a lane that only ran the static half is inconclusive, scope physical."""
        lane = device_lane(physical=False)
        lane.ops[0]["attrs"]["env"]["ALPHA_PARTITIONED_DEVICE_CONFIG"] = "/etc/lane.json"
        v = lane.evaluate()
        assert ("inconclusive", "physical") == (v.verdict, v.scope)
        assert "inconclusive" == status_of(v, "step:preflight")
        assert "inconclusive" == status_of(v, "lane-config")

    def test_step_skipped(self) -> None:
        """A lane that skipped the split run is not a pass, and step:split-run says so."""
        lane = device_lane()
        lane.drop_step("split-run")
        v = lane.evaluate()
        assert "pass" != v.verdict
        assert "inconclusive" == status_of(v, "step:split-run")

    def test_checkpoints_unequal(self) -> None:
        """A resumed checkpoint that differs from the uninterrupted one fails checkpoints-equal."""
        lane = device_lane()
        other = b"diverged checkpoint\n"
        lane.set_artifact("out/split/checkpoint.bin", other)
        lane.fields("split-run")["resumed_checkpoint_sha256"] = sha256(other)
        lane.fields("fresh-evaluation")["checkpoint_sha256"] = sha256(other)
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "checkpoints-equal"))
        assert "pass" == status_of(v, "receipt:split-run")

    def test_checkpoint_receipt_contradicts_captured_bytes(self) -> None:
        """An uninterrupted-run digest that its captured checkpoint contradicts fails."""
        lane = device_lane()
        lane.set_artifact("out/uninterrupted/checkpoint.bin", b"not the checkpoint\n")
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "receipt:uninterrupted-run"))

    def test_checkpoint_not_captured(self) -> None:
        """A checkpoint the receipt names but the stream never captured is inconclusive, never a pass."""
        lane = device_lane()
        lane.drop(o for o in lane.ops if o["attrs"].get("path") == "out/uninterrupted/checkpoint.bin")
        v = lane.evaluate()
        assert "pass" != v.verdict
        assert "inconclusive" == status_of(v, "receipt:uninterrupted-run")

    def test_refusal_control_exits_zero(self) -> None:
        """A wrong-UUID control whose role exited 0 fails, though its receipt still claims the refusal."""
        lane = device_lane()
        lane.one("step.end", "refusal-wrong-uuid")["attrs"]["exit_code"] = 0
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "refusal-control:wrong-uuid"))
        assert "fail" == status_of(v, "step:refusal-wrong-uuid")

    def test_claimed_exit_name_not_in_step_stderr(self) -> None:
        """A refusal receipt claiming device-uuid while the step's stderr shows another refusal fails."""
        lane = device_lane()
        out = next(o for o in lane.ops if o["kind"] == "stderr")
        out["data"] = b"refused: nvidia-plan-host: wrong product\n"
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "refusal-control:wrong-uuid"))
        assert "stderr does not show" in reason_of(v, "refusal-control:wrong-uuid")

    def test_stderr_outside_the_step_does_not_count(self) -> None:
        """The refusal name printed by the lane script outside the step's span is no evidence for the step."""
        lane = device_lane()
        out = next(o for o in lane.ops if o["kind"] == "stderr")
        out["step"] = None
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "step:refusal-wrong-uuid"))

    def test_refusal_receipt_claims_other_exit_code(self) -> None:
        """A refusal receipt whose exit_code is not the step's recorded exit code fails."""
        lane = device_lane()
        lane.fields("refusal-control", control="wrong-product")["exit_code"] = 7
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "refusal-control:wrong-product"))

    def test_refusal_wrote_a_checkpoint(self) -> None:
        """A refusal control that wrote a checkpoint fails its schema."""
        lane = device_lane()
        lane.fields("refusal-control", control="wrong-uuid")["checkpoint_written"] = True
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "refusal-control:wrong-uuid"))

    def test_corrupted_checkpoint_accepted(self) -> None:
        """A corrupted checkpoint that the role accepted (exit 0) fails."""
        lane = device_lane()
        lane.one("step.end", "corrupted-checkpoint")["attrs"]["exit_code"] = 0
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "step:corrupted-checkpoint"))
        assert "fail" == status_of(v, "receipt:corrupted-checkpoint")

    def test_receipt_fields_fail_schema(self) -> None:
        """A split-run receipt whose epoch_after is not 2 fails its schema."""
        lane = device_lane()
        lane.fields("split-run")["epoch_after"] = 3
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "receipt:split-run"))
        assert "epoch_after" in reason_of(v, "receipt:split-run")

    def test_build_sides_differ(self) -> None:
        """A build receipt whose remote sha256 differs from the local one fails."""
        lane = device_lane()
        lane.fields("build", role="beta")["sha256_remote"] = sha256(b"remote")
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "receipt:build"))

    def test_role_not_built_for_device(self) -> None:
        """A declared role with no build receipt is inconclusive."""
        lane = device_lane()
        lane.drop([lane.receipt_op("build", role="beta")])
        v = lane.evaluate()
        assert "inconclusive" == status_of(v, "build-roles")

    def test_qualification_hash_not_matching_captured_file(self) -> None:
        """qualification.json naming a digest the captured file does not have fails qualification-files."""
        lane = device_lane()
        path = "out/qualification.json"
        chunks = [o for o in lane.ops if o["kind"] == "artifact.chunk" and o["attrs"]["path"] == path]
        doc = json.loads(b"".join(c["data"] for c in chunks))
        doc["files"][0]["sha256"] = sha256(b"not it")
        data = json.dumps(doc).encode()
        lane.set_artifact(path, data)
        lane.fields("qualification")["sha256"] = sha256(data)
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "qualification-files"))
        assert "pass" == status_of(v, "receipt:qualification")

    def test_qualification_record_itself_not_matching(self) -> None:
        """A qualification receipt whose sha256 the captured qualification.json contradicts fails."""
        lane = device_lane()
        lane.fields("qualification")["sha256"] = sha256(b"other record")
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "receipt:qualification"))

    def test_produced_file_missing_from_qualification(self) -> None:
        """A file captured beside qualification.json that it does not name leaves the record inconclusive."""
        lane = device_lane()
        i = lane.ops.index(lane.one("step.start", "qualification"))
        extra = SyntheticStream()
        extra.artifact("out/stray.bin", b"unrecorded output\n", "qualification")
        lane.ops[i + 1 : i + 1] = extra.ops[2:]
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "qualification-files"))

    def test_receipts_after_the_command_died(self) -> None:
        """Receipts that arrive after the lane was killed do not count, and receipts-after-exit says so."""
        lane = device_lane()
        exit_op = lane.one("process.exit")
        exit_op["attrs"].update(exit_code=None, signal="SIGKILL")
        late = lane.find("receipt", "qualification") + lane.find("receipt", "corrupted-checkpoint")
        lane.drop([exit_op])
        i = lane.ops.index(lane.one("step.start", "corrupted-checkpoint"))
        lane.ops.insert(i, exit_op)
        lane.move_after_exit(late)
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "receipts-after-exit"))
        assert "inconclusive" == status_of(v, "receipt:qualification")
        assert "inconclusive" == status_of(v, "exit-code")

    def test_lane_timed_out(self) -> None:
        """A lane that timed out before it finished is inconclusive."""
        lane = device_lane()
        lane.drop_step("qualification")
        lane.one("process.exit")["attrs"].update(exit_code=None, signal="SIGTERM", timed_out=True)
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "exit-code"))

    def test_lane_exits_nonzero_after_all_passed(self) -> None:
        """A lane that exits non-zero is never a pass, even when every receipt says pass."""
        lane = device_lane()
        lane.one("process.exit")["attrs"]["exit_code"] = 1
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "exit-code"))

    def test_steps_out_of_order(self) -> None:
        """A build that ran before the preflight fails order:physical."""
        lane = device_lane()
        pre = [o for o in lane.ops if o["step"] == "preflight"]
        build = [o for o in lane.ops if o["step"] == "build"]
        lane.drop(pre + build)
        i = lane.ops.index(lane.one("step.start", "refusal-wrong-uuid"))
        lane.ops[i:i] = build + pre
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "order:physical"))

    def test_receipt_emitted_outside_its_step(self) -> None:
        """A split-run receipt emitted from another step's span fails."""
        lane = device_lane()
        op = lane.receipt_op("split-run")
        lane.drop([op])
        op["step"] = "uninterrupted-run"
        i = lane.ops.index(lane.one("step.end", "uninterrupted-run"))
        lane.ops.insert(i, op)
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "receipt:split-run"))

    def test_duplicate_preflight(self) -> None:
        """Two preflight receipts contradict the one the lane reports: fail."""
        lane = device_lane()
        op = lane.receipt_op("preflight")
        i = lane.ops.index(op)
        lane.ops.insert(i, {**op, "attrs": json.loads(json.dumps(op["attrs"]))})
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "receipt:preflight"))

    def test_invalid_receipt_line(self) -> None:
        """A receipt line that was not a valid receipt leaves the lane inconclusive."""
        lane = device_lane()
        i = lane.ops.index(lane.one("step.end", "build"))
        lane.ops.insert(
            i, {"kind": "receipt.invalid", "attrs": {"reason": "not JSON"}, "data": b"{oops", "step": "build"}
        )
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "receipts-invalid"))

    def test_artifact_bytes_contradict_artifact_event(self) -> None:
        """Captured bytes that do not hash to the artifact event's sha256 fail the check relying on them."""
        lane = device_lane()
        chunk = [
            o for o in lane.ops if o["kind"] == "artifact.chunk" and o["attrs"]["path"] == "out/split/checkpoint.bin"
        ]
        chunk[0]["data"] = chunk[0]["data"][:-1] + b"?"
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "receipt:split-run"))


class TestPreflight:
    def test_device_busy(self) -> None:
        """A preflight that found another compute process is inconclusive, not fail."""
        lane = device_lane()
        op = lane.receipt_op("preflight")
        op["attrs"]["status"] = "inconclusive"
        op["attrs"]["fields"]["compute_processes"] = [{"pid": 4242, "name": "python", "uuid": "GPU-0000-alpha"}]
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "preflight-rules"))
        assert "busy" in reason_of(v, "preflight-rules")

    def _set_gpus(self, lane: SyntheticStream, edit: dict[str, object], index: int = 0) -> None:
        gpus = lane.fields("preflight")["gpus"]
        gpus[index].update(edit)
        rewrite_json(lane, "out/binding.json", {"gpus": gpus})

    def test_product_not_allowed(self) -> None:
        """A GPU whose product the default allow-list does not name fails preflight-rules."""
        lane = device_lane()
        self._set_gpus(lane, {"product": "Tesla T4"})
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "preflight-rules"))
        assert "pass" == status_of(v, "preflight-binding")

    def test_product_allowed_by_lane_config(self) -> None:
        """The lane config's products allow-list replaces the default one."""
        lane = device_lane()
        self._set_gpus(lane, {"product": "Tesla T4"})
        self._set_gpus(lane, {"product": "Tesla T4"}, 1)
        rename_observed(lane, "Tesla T4")
        rewrite_json(lane, RECORDED_CONFIG, {"products": ["Tesla T4"]})
        v = lane.evaluate()
        assert ("pass", "pass") == (v.verdict, status_of(v, "preflight-rules"))

    def test_lane_config_narrows_products(self) -> None:
        """A lane config whose allow-list excludes the GPU found fails preflight-rules."""
        lane = device_lane()
        rewrite_json(lane, RECORDED_CONFIG, {"products": ["NVIDIA GeForce RTX 3070"]})
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "preflight-rules"))

    def test_wrong_driver_release(self) -> None:
        """A driver outside the allowed release fails preflight-rules."""
        lane = device_lane()
        self._set_gpus(lane, {"driver": "575.51.02"})
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "preflight-rules"))

    def test_minors_not_unique(self) -> None:
        """One minor naming two different cards contradicts itself: preflight-rules fails."""
        lane = device_lane()
        self._set_gpus(lane, {"minor": 1})
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "preflight-rules"))

    def test_one_minor_on_each_of_two_hosts(self) -> None:
        """Two hosts each binding their minor 0 (distinct cards, each binding naming its node) pair one to one;
        two bindings naming one node and one minor still contradict themselves."""
        lane = device_lane()
        nodes = [{"host": f"root@10.0.0.{i}", "minors": [0], "remote_root": "/r"} for i in (1, 2)]
        rewrite_json(lane, RECORDED_CONFIG, {"transport": "ssh-tunnel", "nodes": nodes})
        gpus = lane.fields("preflight")["gpus"]
        self._set_gpus(lane, {"minor": gpus[1]["minor"], "node": "root@10.0.0.1:22"})
        self._set_gpus(lane, {"node": "root@10.0.0.2:22"}, index=1)
        assert "pass" == status_of(lane.evaluate(), "preflight-rules")
        self._set_gpus(lane, {"node": "root@10.0.0.2:22"})
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "preflight-rules"))
        assert "do not pair one to one" in reason_of(v, "preflight-rules")

    def test_a_node_claimed_on_one_host_pairs_nothing_away(self) -> None:
        """A lane on one host that names a different ``node`` in each binding to hide one minor bound to two cards
        still contradicts itself: only an ssh-tunnel config the recorder captured spreads minors over hosts."""
        lane = device_lane()
        gpus = lane.fields("preflight")["gpus"]
        self._set_gpus(lane, {"minor": gpus[1]["minor"], "node": "a"})
        self._set_gpus(lane, {"node": "b"}, index=1)
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "preflight-rules"))
        assert "do not pair one to one" in reason_of(v, "preflight-rules")

    def test_uuids_not_distinct(self) -> None:
        """One card under two minors contradicts itself: preflight-rules fails."""
        lane = device_lane()
        self._set_gpus(lane, {"uuid": "GPU-0001-beta"})
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "preflight-rules"))

    def test_roles_share_one_gpu(self) -> None:
        """Both roles bound to one card (same minor and UUID) leaves the preflight inconclusive, not failed."""
        lane = device_lane()
        self._set_gpus(lane, {"minor": 0, "uuid": "GPU-0000-alpha"}, 1)
        for p in sample(lane)["attrs"]["processes"]:
            p["gpu"] = "GPU-0000-alpha"  # and the recorder saw both roles there
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "preflight-rules"))
        assert "pass" == status_of(v, "devices-observed")

    def test_binding_file_disagrees_with_receipt(self) -> None:
        """A captured binding.json naming other GPUs than the preflight receipt fails preflight-binding."""
        lane = device_lane()
        gpus = json.loads(json.dumps(lane.fields("preflight")["gpus"]))
        gpus[1]["uuid"] = "GPU-9999"
        rewrite_json(lane, "out/binding.json", {"gpus": gpus})
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "preflight-binding"))

    def test_lane_config_not_captured(self) -> None:
        """With the config set but no capture of it at all, the allow-lists are unknown: inconclusive."""
        lane = device_lane()
        lane.drop(o for o in lane.ops if o["attrs"].get("path") in ("out/lane-config.json", RECORDED_CONFIG))
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "lane-config"))
        assert "inconclusive" == status_of(v, "preflight-rules")


class TestShadowAndEvaluation:
    def test_host_shadow_changes_trajectory(self) -> None:
        """A coordinate lane whose shadow trajectory differs fails receipt:host-shadow-control."""
        lane = device_lane("coordinate-device")
        lane.fields("host-shadow-control")["shadow_trajectory_sha256"] = sha256(b"moved")
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "receipt:host-shadow-control"))

    def test_host_shadow_missing_in_independent_lane(self) -> None:
        """An independent lane without its host-shadow control is not a pass."""
        lane = device_lane("independent-device")
        lane.drop_step("host-shadow-control")
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "step:host-shadow-control"))

    @pytest.mark.parametrize(("gate", "expected"), [("distributed-device", "pass"), ("coordinate-device", "fail")])
    def test_fresh_evaluation_on_host(self, gate: str, expected: str) -> None:
        """A fresh evaluation on the host is allowed for the distributed lane only."""
        lane = device_lane(gate)
        lane.fields("fresh-evaluation")["device"] = "host"
        v = lane.evaluate()
        assert (expected, expected) == (v.verdict, status_of(v, "receipt:fresh-evaluation"))

    def test_fresh_evaluation_from_other_checkpoint(self) -> None:
        """A fresh evaluation from a checkpoint other than the resumed one fails."""
        lane = device_lane()
        lane.fields("fresh-evaluation")["checkpoint"] = "out/uninterrupted/checkpoint.bin"
        lane.fields("fresh-evaluation")["checkpoint_sha256"] = sha256(b"x")
        v = lane.evaluate()
        assert "fail" == status_of(v, "fresh-evaluation-checkpoint")


class TestEveryEventCounts:
    @pytest.mark.parametrize("gate", DEVICE_GATES)
    def test_dropping_any_event_is_never_a_pass(self, gate: str) -> None:
        """Removing any one event a physical lane recorded (but process.start) turns its pass into no pass."""
        right = device_lane(gate)
        passed = []
        for i, op in enumerate(right.ops):
            if op["kind"] == "process.start":
                continue
            if op["attrs"].get("path") == "out/lane-config.json":
                continue  # the lane's own copy of its config is no evidence: the recorder's capture is
            lane = device_lane(gate)
            del lane.ops[i]
            if lane.evaluate().verdict == "pass":
                passed.append((i, op["kind"], op["attrs"].get("name") or op["attrs"].get("path")))
        assert [] == passed


class TestStaticExecutables:
    """Issue 10, finding 3: the static half needs its executables, not receipts naming them."""

    def test_receipts_naming_nothing_captured(self) -> None:
        """Receipts claiming target nothing/here.pyz, sha256 0...0, with no artifact at all: inconclusive, not 9/9."""
        s = SyntheticStream(gate="distributed-device")
        claim = {"role": "r", "target": "nothing/here.pyz", "sha256": "0" * 64}
        s.step_start("static-build")
        s.receipt("static-build", step="static-build", **claim)
        s.step_end("static-build")
        s.step_start("static-check")
        s.receipt("static-check", step="static-check", check="c", result="pass", **claim)
        s.step_end("static-check")
        s.exit(0)
        v = s.evaluate()
        assert ("inconclusive", "static") == (v.verdict, v.scope)
        assert "inconclusive" == status_of(v, "receipt:static-build")
        assert "inconclusive" == status_of(v, "receipt:static-check")
        assert "nothing/here.pyz" in reason_of(v, "receipt:static-build")

    def test_executable_not_captured(self) -> None:
        """A role's built executable that was never captured leaves the static half inconclusive."""
        lane = device_lane(physical=False)
        lane.drop(o for o in lane.ops if o["attrs"].get("path") == "out/static/beta")
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "receipt:static-build"))

    def test_check_of_bytes_never_captured(self) -> None:
        """A static-check of a file other than the captured executable (same digest claimed) is not a pass."""
        lane = device_lane(physical=False)
        lane.fields("static-check", role="alpha")["target"] = "elsewhere/alpha"
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "receipt:static-check"))

    def test_check_of_other_captured_bytes(self) -> None:
        """A static-check whose target is captured with other bytes than the digest it claims to have checked fails."""
        lane = device_lane(physical=False)
        lane.fields("static-check", role="alpha")["target"] = "out/static/beta"
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "receipt:static-check"))


class TestLaneConfigCapture:
    """The lane config judged is the recorder's capture of the file its variable named, never a copy the lane sent."""

    def test_lane_copy_alone_is_inconclusive(self) -> None:
        """A lane-captured lane-config.json with no recorder capture: lane-config and preflight-rules inconclusive."""
        lane = device_lane()
        lane.drop(o for o in lane.ops if o["attrs"].get("path") == RECORDED_CONFIG)
        assert lane.find("artifact", "out/lane-config.json")
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "lane-config"))
        assert "origin 'recorder'" in reason_of(v, "lane-config")
        assert "inconclusive" == status_of(v, "preflight-rules")
        assert "did not capture" in reason_of(v, "preflight-rules")

    def test_command_capture_of_the_config_path_is_not_the_recorders(self) -> None:
        """The command capturing the very file its variable names (no origin) is still not the recorder's capture."""
        lane = device_lane()
        rec = lane.one("artifact", RECORDED_CONFIG)
        lane.drop(o for o in lane.ops if o["attrs"].get("path") == RECORDED_CONFIG)
        i = lane.ops.index(lane.one("step.end", "preflight"))
        extra = SyntheticStream()
        extra.artifact(RECORDED_CONFIG, b'{"products": ["NVIDIA GeForce RTX 3090"]}', "preflight")
        lane.ops[i:i] = extra.ops[2:]
        assert "origin" in rec["attrs"]
        assert "origin" not in lane.one("artifact", RECORDED_CONFIG)["attrs"]
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "lane-config"))
        assert "inconclusive" == status_of(v, "preflight-rules")

    def test_unknown_allow_list_contradicts_nothing(self) -> None:
        """Without the recorder's capture, a product outside the default list is unknown, not wrong: inconclusive."""
        lane = device_lane()
        lane.drop(o for o in lane.ops if o["attrs"].get("path") == RECORDED_CONFIG)
        TestPreflight()._set_gpus(lane, {"product": "NVIDIA H200"})
        v = lane.evaluate()
        assert "inconclusive" == status_of(v, "preflight-rules")

    def test_lane_copy_cannot_widen_the_allow_list(self) -> None:
        """The lane's own copy naming another product does not change the allow-list: a Tesla T4 still fails."""
        lane = device_lane()
        rewrite_json(lane, "out/lane-config.json", {"products": ["Tesla T4"]})
        gpus = lane.fields("preflight")["gpus"]
        for g in gpus:
            g["product"] = "Tesla T4"
        rewrite_json(lane, "out/binding.json", {"gpus": gpus})
        rename_observed(lane, "Tesla T4")
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "preflight-rules"))
        assert "pass" == status_of(v, "devices-observed")

    def test_command_capture_of_the_same_path_does_not_replace_it(self) -> None:
        """The command capturing the config's own path again (other bytes, no origin) does not hide the recorder's."""
        lane = device_lane()
        i = lane.ops.index(lane.one("step.end", "preflight"))
        extra = SyntheticStream()
        extra.artifact(RECORDED_CONFIG, json.dumps({"products": ["Tesla T4"]}).encode(), "preflight")
        lane.ops[i:i] = extra.ops[2:]
        gpus = lane.fields("preflight")["gpus"]
        gpus[0]["product"] = "Tesla T4"
        rewrite_json(lane, "out/binding.json", {"gpus": gpus})
        v = lane.evaluate()
        assert ("fail", "pass") == (status_of(v, "preflight-rules"), status_of(v, "lane-config"))

    def test_capture_of_another_variable_does_not_count(self) -> None:
        """A recorder capture of another lane's variable is not this lane's config."""
        lane = device_lane("distributed-device")
        lane.one("artifact", RECORDED_CONFIG)["attrs"]["env"] = "ALPHA_COORDINATE_DEVICE_CONFIG"
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "lane-config"))

    def test_condition_reads_stream_open_env(self) -> None:
        """The physical part applies by stream.open's env: a recorder capture without the variable set does not."""
        lane = device_lane()
        lane.ops[0]["attrs"]["env"].pop("ALPHA_PARTITIONED_DEVICE_CONFIG")
        assert lane.one("artifact", RECORDED_CONFIG)["attrs"]["origin"] == "recorder"
        v = lane.evaluate()
        assert ("pass", "static") == (v.verdict, v.scope)
        assert not any(c.name in ("lane-config", "devices-observed") for c in v.checks)


class TestDevicesObserved:
    """devices-observed: physical scope rests on what the recorder observed through NVML."""

    @pytest.mark.parametrize("gate", DEVICE_GATES)
    def test_no_observation_is_inconclusive(self, gate: str) -> None:
        """A right lane with no device observation at all: inconclusive, and devices-observed alone says why."""
        v = device_lane(gate, observer=None).evaluate()
        assert ("inconclusive", "physical") == (v.verdict, v.scope)
        assert [("devices-observed", "inconclusive")] == [(c.name, c.status) for c in v.checks if c.status != "pass"]
        assert "no device observation" in reason_of(v, "devices-observed")

    def test_simulated_observer_never_physical(self) -> None:
        """Observer simulated (ALPHA_OBSERVE_SIMULATED_GPUS): inconclusive, whatever else the stream says."""
        lane = device_lane(observer="simulated")
        for o in lane.find("device.observed"):
            o["attrs"]["simulated_from"] = {"path": "/tmp/gpus.json", "sha256": "b" * 64}
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "devices-observed"))
        assert "simulated" in reason_of(v, "devices-observed")
        assert "/tmp/gpus.json" in reason_of(v, "devices-observed")

    def test_forged_file_claiming_nvml_is_still_simulated(self) -> None:
        """An observation that names an NVML observer but was simulated from a file (simulated_from) is not NVML's."""
        lane = device_lane()
        sample(lane)["attrs"]["simulated_from"] = {"path": "/tmp/forged.json", "sha256": "c" * 64}
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "devices-observed"))
        assert "simulated" in reason_of(v, "devices-observed")

    def test_observer_none(self) -> None:
        """A machine where NVML could not be loaded: observer none, inconclusive, with NVML's error."""
        lane = device_lane(observer="none")
        for o in lane.find("device.observed"):
            o["attrs"]["error"] = "NVML Shared Library Not Found"
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "devices-observed"))
        assert "observer none" in reason_of(v, "devices-observed")
        assert "Not Found" in reason_of(v, "devices-observed")

    def test_nvml_error_listing_no_gpu(self) -> None:
        """NVML loaded but listed no GPU, with an error: the recorder saw nothing, so nothing is contradicted."""
        lane = device_lane()
        for o in lane.find("device.observed"):
            o["attrs"].update(gpus=[], processes=[], error="NVML_ERROR_GPU_IS_LOST")
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "devices-observed"))
        assert "GPU_IS_LOST" in reason_of(v, "devices-observed")

    def test_receipt_and_artifact_posing_as_observation_are_ignored(self) -> None:
        """A receipt named device.observed and a captured observation file are claims: still no observation."""
        lane = device_lane(observer=None)
        right = device_lane()
        forged = sample(right)["attrs"]
        i = lane.ops.index(lane.one("step.end", "uninterrupted-run"))
        extra = SyntheticStream()
        extra.receipt("device.observed", "pass", step="uninterrupted-run", **forged)
        extra.artifact("out/device.observed.json", json.dumps(forged).encode(), "uninterrupted-run")
        lane.ops[i:i] = extra.ops[2:]
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "devices-observed"))
        assert "no device observation" in reason_of(v, "devices-observed")

    def test_lane_process_on_the_wrong_gpu(self) -> None:
        """Each role's process working on the other's GPU (a CUDA_VISIBLE_DEVICES swap unknown to the binding): fail."""
        lane = device_lane()
        procs = sample(lane)["attrs"]["processes"]
        procs[:] = [p for p in procs if p["used_memory"] > 400 << 20]
        procs[0]["gpu"], procs[1]["gpu"] = procs[1]["gpu"], procs[0]["gpu"]
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "devices-observed"))
        reason = reason_of(v, "devices-observed")
        assert "alpha's pid 200" in reason
        assert "bound to GPU GPU-0000-alpha" in reason

    @pytest.mark.parametrize(
        "exe",
        ["out/static/{r}", "/lane/out/build/{r}", "/srv/lane/remote/{r}"],
        ids=["static-target", "absolute-in-cwd", "uploaded-copy"],
    )
    def test_role_known_by_its_executable_wherever_it_runs(self, exe: str) -> None:
        """A role's process is known by its executable's path, or by a file name only that role's executables carry."""
        lane = device_lane()
        procs = sample(lane)["attrs"]["processes"]
        for p in procs:
            r = "alpha" if p["pid"] == 200 else "beta"
            p["argv"] = ["/usr/bin/python3", exe.format(r=r), "serve", "--socket", "/tmp/s"]
        right = lane.evaluate()
        for p in procs:
            p["gpu"] = "GPU-0001-beta"
        wrong = lane.evaluate()
        assert ("pass", "fail") == (status_of(right, "devices-observed"), status_of(wrong, "devices-observed"))
        assert "alpha's pid 200" in reason_of(wrong, "devices-observed")

    def test_one_finding_per_process(self) -> None:
        """A process seen on the wrong GPU in many samples is reported once."""
        lane = device_lane()
        op = sample(lane)
        procs = op["attrs"]["processes"]
        procs[:] = [p for p in procs if p["used_memory"] > 400 << 20]
        procs[0]["gpu"], procs[1]["gpu"] = procs[1]["gpu"], procs[0]["gpu"]
        i = lane.ops.index(op)
        lane.ops[i:i] = [json.loads(json.dumps(op)) for _ in range(5)]
        v = lane.evaluate()
        assert 1 == reason_of(v, "devices-observed").count("alpha's pid 200")

    def test_process_works_where_it_holds_most_memory(self) -> None:
        """beta's process holding more memory on alpha's GPU than on its own works there: fail."""
        lane = device_lane()
        for p in sample(lane)["attrs"]["processes"]:
            if p["pid"] == 201:
                p["used_memory"] = (300 << 20) if p["gpu"] == "GPU-0001-beta" else (600 << 20)
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "devices-observed"))
        assert "beta's pid 201" in reason_of(v, "devices-observed")

    def test_tree_process_on_a_gpu_no_role_is_bound_to(self) -> None:
        """A process of the recorded tree working on a third GPU, bound to no role: fail."""
        lane = device_lane()
        for o in lane.find("device.observed"):
            o["attrs"]["gpus"].append(observed_gpu(2, "GPU-0002-spare"))
        argv = ["python3", "miner.py"]
        sample(lane)["attrs"]["processes"].append(
            {"pid": 300, "gpu": "GPU-0002-spare", "used_memory": 1 << 30, "in_tree": True, "steps": [], "argv": argv}
        )
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "devices-observed"))
        assert "GPU-0002-spare, which no role is bound to" in reason_of(v, "devices-observed")

    def test_preflight_names_a_gpu_never_observed(self) -> None:
        """A preflight (and its binding) naming a GPU the recorder never saw: fail."""
        lane = device_lane()
        gpus = lane.fields("preflight")["gpus"]
        gpus[1]["uuid"] = "GPU-fa4e0000-0000-4000-8000-000000000001"
        rewrite_json(lane, "out/binding.json", {"gpus": gpus})
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "devices-observed"))
        assert "GPU-fa4e0000-0000-4000-8000-000000000001" in reason_of(v, "devices-observed")
        assert "never observed" in reason_of(v, "devices-observed")

    def test_driver_mismatch(self) -> None:
        """The recorder observed another driver than the preflight reports: fail."""
        lane = device_lane()
        for o in lane.find("device.observed"):
            o["attrs"]["driver"] = "580.65.06"
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "devices-observed"))
        assert "driver" in reason_of(v, "devices-observed")

    def test_product_mismatch(self) -> None:
        """The recorder observed another product than the preflight reports: fail."""
        lane = device_lane()
        rename_observed(lane, "NVIDIA H200")
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "devices-observed"))
        assert "NVIDIA H200" in reason_of(v, "devices-observed")

    def test_driver_changed_during_recording(self) -> None:
        """Observations that disagree on the driver contradict each other: fail."""
        lane = device_lane()
        sample(lane)["attrs"]["driver"] = "580.65.06"
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "devices-observed"))

    def test_bound_gpu_idle_during_run_steps(self) -> None:
        """A bound GPU on which no process of the tree was seen during the run steps: inconclusive."""
        lane = device_lane()
        procs = sample(lane)["attrs"]["processes"]
        procs[:] = [p for p in procs if p["pid"] != 201]
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "devices-observed"))
        assert "beta's own process (running its captured executable) was not seen on its bound GPU GPU-0001-beta" in (
            reason_of(v, "devices-observed")
        )

    def test_process_seen_outside_the_run_steps_does_not_count(self) -> None:
        """Processes seen only while building (not in a run step) show no run on the device: inconclusive."""
        lane = device_lane()
        op = sample(lane)
        lane.drop([op])
        for p in op["attrs"]["processes"]:
            p["steps"] = ["build"]
        lane.ops.insert(lane.ops.index(lane.one("step.end", "build")), op)
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "devices-observed"))

    def test_other_process_on_a_bound_gpu(self) -> None:
        """A process outside the recorded tree on a bound GPU during a run step: the device was shared, inconclusive."""
        lane = device_lane()
        sample(lane)["attrs"]["processes"].append(
            {"pid": 999, "gpu": "GPU-0001-beta", "used_memory": 2 << 30, "in_tree": False, "steps": [], "argv": None}
        )
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "devices-observed"))
        assert "pid 999, not of the recorded tree" in reason_of(v, "devices-observed")

    @pytest.mark.parametrize("phase", ["start", "end"])
    def test_observation_without_start_or_end(self, phase: str) -> None:
        """An observation that lacks its start or its end did not cover the whole command: inconclusive."""
        lane = device_lane()
        lane.drop(o for o in lane.find("device.observed") if o["attrs"]["phase"] == phase)
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "devices-observed"))
        assert f"no {phase}" in reason_of(v, "devices-observed")

    def _unattributed(self, lane: SyntheticStream) -> dict[str, object]:
        op = sample(lane)
        op["attrs"]["processes"] = []
        op["attrs"]["attribution"] = "unavailable"
        return op

    def test_unattributed_is_inconclusive_whatever_the_activity(self) -> None:
        """Unattributed by NVML: memory and utilisation rising on each bound GPU show work, not whose: inconclusive.

        (Before attribution by identity this passed on activity alone; a role's own process must be seen.)
        """
        lane = device_lane()
        op = self._unattributed(lane)
        lane.telemetry(
            [
                {"uuid": u, "utilization": 87, "memory_used": 900 << 20, "temperature": 50}
                for u in ("GPU-0000-alpha", "GPU-0001-beta")
            ],
            at=lane.ops.index(op),
        )
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "devices-observed"))
        reason = reason_of(v, "devices-observed")
        assert "NVML could not attribute processes (attribution unavailable" in reason
        assert "alpha's own process (running its captured executable) was not seen" in reason
