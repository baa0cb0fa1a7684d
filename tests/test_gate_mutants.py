"""Mutant tests for the device gates, on synthetic streams: one thing wrong at a time.

Each test starts from ``gates.testing.device_lane`` (a right lane), breaks
exactly one thing, and checks that the verdict is not a pass and that the
rule meant to notice names it.
"""

from __future__ import annotations

import json

import pytest

from gates.testing import DEVICE_CONFIG_VARS, SyntheticStream, device_lane, sha256
from gates.verdict import Verdict

DEVICE_GATES = sorted(DEVICE_CONFIG_VARS)


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
        rewrite_json(lane, "out/lane-config.json", {"products": ["Tesla T4"]})
        v = lane.evaluate()
        assert ("pass", "pass") == (v.verdict, status_of(v, "preflight-rules"))

    def test_lane_config_narrows_products(self) -> None:
        """A lane config whose allow-list excludes the GPU found fails preflight-rules."""
        lane = device_lane()
        rewrite_json(lane, "out/lane-config.json", {"products": ["NVIDIA GeForce RTX 3070"]})
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
        v = lane.evaluate()
        assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "preflight-rules"))

    def test_binding_file_disagrees_with_receipt(self) -> None:
        """A captured binding.json naming other GPUs than the preflight receipt fails preflight-binding."""
        lane = device_lane()
        gpus = json.loads(json.dumps(lane.fields("preflight")["gpus"]))
        gpus[1]["uuid"] = "GPU-9999"
        rewrite_json(lane, "out/binding.json", {"gpus": gpus})
        v = lane.evaluate()
        assert ("fail", "fail") == (v.verdict, status_of(v, "preflight-binding"))

    def test_lane_config_not_captured(self) -> None:
        """With the config set but lane-config.json not captured, the allow-lists are unknown: inconclusive."""
        lane = device_lane()
        lane.drop(o for o in lane.ops if o["attrs"].get("path") == "out/lane-config.json")
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
            lane = device_lane(gate)
            del lane.ops[i]
            if lane.evaluate().verdict == "pass":
                passed.append((i, op["kind"], op["attrs"].get("name") or op["attrs"].get("path")))
        assert [] == passed
