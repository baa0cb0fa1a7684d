"""The reference lane at N owner roles (samples/lane; DESIGN "Any number of GPUs"): config, learner, oracle.

N = 2 is the two-GPU lane exactly as it was; 3, 4 and 8 split their samples unequally, combine in
one declared order and match the oracle, which shares no code with the lane, bit for bit.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from gates.oracle_results import ORACLE_CHECKPOINT
from observe.devices import lane_config
from tests.helpers.paths import SAMPLES

LANE_DIR = SAMPLES / "lane"
sys.path.insert(0, str(LANE_DIR))

import oracle  # noqa: E402
from lanekit import checkpoint  # noqa: E402
from lanekit.build import build_role  # noqa: E402
from lanekit.config import ConfigError, MinorTwiceError, load_config  # noqa: E402
from lanekit.device import host_binding  # noqa: E402
from lanekit.learner import Coordinator  # noqa: E402
from lanekit.role import run_in_process  # noqa: E402
from lanekit.session import run_lane  # noqa: E402
from lanekit.spec import DATA_X, DATA_Y, LANES, default_spec, owners_of, unhexf  # noqa: E402

pytestmark = pytest.mark.timeout(120)

COUNTS = (2, 3, 4, 8)
GATE_OF = {"partitioned": "distributed-device", "coordinates": "coordinate-device", "independent": "independent-device"}


def _config(tmp_path: Path, **fields: Any) -> str:
    doc = {"owner": "t", "pod_ids": ["p"], "transport": "loopback", "remote_root": "/tmp/lane", **fields}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    return str(path)


def _node(port: int, minors: list[int] | None) -> dict[str, Any]:
    node: dict[str, Any] = {"host": "lane@127.0.0.1", "port": port, "remote_root": "/tmp/lane"}
    if minors is not None:
        node["minors"] = minors
    return node


class TestSpec:
    def test_two_owners_are_the_two_gpu_learner(self) -> None:
        """At N = 2 the data, split, combine order and learner ids are the two-GPU lane's (the gates' pins)."""
        for lane in LANES:
            spec = default_spec(lane)
            assert default_spec(lane, 2) == spec
            assert (DATA_X, DATA_Y) == spec.data
            assert ((0,), (1, 2)) == spec.split
            assert ("owner-0", "owner-1") == spec.combine_order
            assert f'"learner":"{spec.learner_id}"'.encode() in ORACLE_CHECKPOINT[GATE_OF[lane]]

    @pytest.mark.parametrize("count", COUNTS)
    def test_split_is_unequal_and_covers_every_sample(self, count: int) -> None:
        """Owner j holds j+1 samples (no two owners the same count), every sample once, N coordinates each."""
        spec = default_spec("partitioned", count)
        x, y = spec.data
        assert owners_of(count) == spec.owners == spec.combine_order
        assert list(range(1, count + 1)) == [len(s) for s in spec.split]
        assert list(range(len(y))) == [i for s in spec.split for i in s]
        assert {count} == {len(row) for row in x}

    def test_fewer_than_two_owners_refused(self) -> None:
        """A learner of one owner is no multi-GPU lane."""
        with pytest.raises(ValueError, match="at least 2"):
            default_spec("coordinates", 1)

    def test_owner_counts_are_different_learners(self) -> None:
        """Each N is its own learner identity, so peers built for different N refuse each other."""
        ids = {default_spec("coordinates", n).learner_id for n in COUNTS}
        assert len(COUNTS) == len(ids)


class TestOracle:
    @pytest.mark.parametrize("count", COUNTS)
    @pytest.mark.parametrize("lane", LANES)
    def test_in_process_matches_oracle(self, lane: str, count: int) -> None:
        """The learner's CPU path at N owners gives the oracle's trajectory bit for bit, update by update."""
        _chunks, rows = run_in_process(default_spec(lane, count))
        assert oracle.hex_rows(lane, 5, count) == rows

    @pytest.mark.parametrize("count", COUNTS)
    def test_averaging_mutant_caught(self, count: int, monkeypatch: pytest.MonkeyPatch) -> None:
        """A coordinator that averages the owners' means instead of weighting by samples misses the oracle."""

        def averaged(self: Coordinator, contributions: dict[str, dict[str, Any]]) -> list[float]:
            means = [[unhexf(g) / float(c["n"]) for g in c["g"]] for c in contributions.values()]
            return [sum(m[k] for m in means) / float(len(means)) for k in range(len(means[0]))]

        monkeypatch.setattr(Coordinator, "_combine", averaged)
        _chunks, rows = run_in_process(default_spec("partitioned", count))
        assert oracle.hex_rows("partitioned", 5, count) != rows

    @pytest.mark.parametrize("count", [3, 4])
    def test_reordered_combine_mutant_caught(self, count: int, monkeypatch: pytest.MonkeyPatch) -> None:
        """Adding the owners' contributions in another order than the declared one is seen in the bits."""
        original = Coordinator._combine

        def reordered(self: Coordinator, contributions: dict[str, dict[str, Any]]) -> list[float]:
            spec = self.spec.with_changes(combine_order=tuple(reversed(self.spec.combine_order)))
            return original(Coordinator(spec, self.channels), contributions)

        monkeypatch.setattr(Coordinator, "_combine", reordered)
        rows = [run_in_process(default_spec(lane, count))[1] for lane in ("partitioned", "coordinates")]
        assert [oracle.hex_rows(lane, 5, count) for lane in ("partitioned", "coordinates")] != rows

    def test_oracle_shares_no_code_with_the_lane(self) -> None:
        """samples/lane/oracle.py imports only the standard library: nothing of lanekit."""
        tree = ast.parse((LANE_DIR / "oracle.py").read_text())
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {str(n.module).split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert {"__future__", "json", "sys"} == imported

    @pytest.mark.parametrize("count", [3, 4])
    def test_processes_match_oracle(self, count: int, tmp_path: Path) -> None:
        """N+1 fresh processes (each role its executable) publish the oracle's checkpoint, and the host-shadow run
        and a split run give the same bytes."""
        spec = default_spec("coordinates", count)
        exes = {r: build_role(spec, r, host_binding(), tmp_path / "exes")[0] for r in spec.owners}
        files = {}
        for name, kwargs in {
            "plain": {"updates": 5, "epoch": 1},
            "shadow": {"updates": 5, "epoch": 1, "shadow": True},
            "before": {"updates": 3, "epoch": 1},
        }.items():
            out = {k: str(tmp_path / name / f"{k}.json") for k in ("checkpoint", "trajectory", "membership")}
            result = run_lane(
                exes,
                checkpoint_out=out["checkpoint"],
                trajectory_out=out["trajectory"],
                membership_out=out["membership"],
                timeout=60,
                **kwargs,  # type: ignore[arg-type]
            )
            assert result.ok, result.output
            files[name] = out
        after = {k: str(tmp_path / "after" / f"{k}.json") for k in ("checkpoint", "trajectory", "membership")}
        resumed = run_lane(
            exes,
            updates=2,
            epoch=2,
            checkpoint_out=after["checkpoint"],
            trajectory_out=after["trajectory"],
            membership_out=after["membership"],
            resume=files["before"]["checkpoint"],
            resume_membership=files["before"]["membership"],
            timeout=60,
        )
        assert resumed.ok, resumed.output
        step, chunks = checkpoint.load(files["plain"]["checkpoint"])
        want = {k: [v.hex() for v in vals] for k, vals in oracle.trajectory("coordinates", 5, count)[-1].items()}
        assert (5, want) == (step, {k: [v.hex() for v in vals] for k, vals in chunks.items()})
        plain = Path(files["plain"]["checkpoint"]).read_bytes()
        assert plain == Path(files["shadow"]["checkpoint"]).read_bytes() == Path(after["checkpoint"]).read_bytes()
        owners = json.loads(Path(files["shadow"]["membership"]).read_text())["owners"]
        assert [5] * count == [o["shadow_overwrites"] for o in owners]


class TestConfig:
    @pytest.mark.parametrize("count", COUNTS)
    def test_loopback_binds_n_minors(self, count: int, tmp_path: Path) -> None:
        """A loopback config of N distinct minors binds N roles, all on its one node."""
        config = load_config(_config(tmp_path, host="local", minors=list(range(count))))
        assert (list(range(count)), [0] * count) == (config["minors"], config["role_nodes"])

    @pytest.mark.parametrize("minors", [[0], [], [0, "1"], [0, True]])
    def test_fewer_than_two_integers_refused(self, minors: list[Any], tmp_path: Path) -> None:
        """One minor, none, or a minor that is not an integer: not a lane config."""
        with pytest.raises(ConfigError, match="2 or more integers"):
            load_config(_config(tmp_path, host="local", minors=minors))

    def test_minor_bound_twice_on_one_host_refused(self, tmp_path: Path) -> None:
        """Two roles on one minor of this machine: refused by name, naming the minor and both roles."""
        with pytest.raises(MinorTwiceError, match=r"minor 2 of this machine is bound to owner-1 and owner-3"):
            load_config(_config(tmp_path, host="local", minors=[0, 2, 1, 2]))

    def test_tunnel_nodes_carry_several_roles(self, tmp_path: Path) -> None:
        """ssh-tunnel nodes each carrying two roles: the roles in node order, minors per host (both hosts' 0 and 1)."""
        path = _config(tmp_path, transport="ssh-tunnel", nodes=[_node(2201, [0, 1]), _node(2202, [0, 1])])
        config = load_config(path)
        assert ([0, 1, 0, 1], [0, 0, 1, 1]) == (config["minors"], config["role_nodes"])

    def test_tunnel_minor_twice_on_one_node_refused(self, tmp_path: Path) -> None:
        """A node naming one minor twice binds one GPU to two roles."""
        path = _config(tmp_path, transport="ssh-tunnel", nodes=[_node(2201, [0, 0]), _node(2202, [1])])
        said = re.escape("minor 0 of lane@127.0.0.1:2201 is bound to owner-0 and owner-1")
        with pytest.raises(MinorTwiceError, match=said):
            load_config(path)

    def test_tunnel_entries_naming_one_host_are_one_host(self, tmp_path: Path) -> None:
        """Two node entries of one host and port binding the same minor: one GPU, refused."""
        path = _config(tmp_path, transport="ssh-tunnel", nodes=[_node(2201, [3]), _node(2201, [3, 4])])
        with pytest.raises(MinorTwiceError, match=re.escape("minor 3 of lane@127.0.0.1:2201")):
            load_config(path)

    def test_tunnel_one_role_per_node_as_before(self, tmp_path: Path) -> None:
        """Nodes naming no minors carry one role each, the top level's minors in role order (as for two GPUs)."""
        path = _config(tmp_path, transport="ssh-tunnel", minors=[0, 0, 0], nodes=[_node(p, None) for p in (1, 2, 3)])
        assert [0, 1, 2] == load_config(path)["role_nodes"]
        wrong = _config(tmp_path, transport="ssh-tunnel", minors=[0, 1, 2], nodes=[_node(1, None), _node(2, None)])
        with pytest.raises(ConfigError, match="3 objects, one per role"):
            load_config(wrong)

    def test_tunnel_minors_differing_from_top_level_refused(self, tmp_path: Path) -> None:
        """The nodes' minors and a top-level ``minors`` that says otherwise contradict each other."""
        path = _config(tmp_path, transport="ssh-tunnel", minors=[0, 1], nodes=[_node(1, [0, 1]), _node(2, [2])])
        with pytest.raises(ConfigError, match=r"differ from the nodes' minors \[0, 1, 2\]"):
            load_config(path)

    def test_one_reader_serves_lane_and_recorder(self, tmp_path: Path) -> None:
        """The recorder's reader (observe.devices.lane_config) gives the lane's binding: one rule, one module."""
        doc = {"transport": "ssh-tunnel", "nodes": [_node(1, [4, 5]), _node(2, [6])], "remote_root": "/tmp/lane"}
        binding = lane_config.role_binding(doc)
        assert ((0, 0, 1), (4, 5, 6), (0, 1)) == (binding.nodes, binding.minors, binding.on_node(0))
        config = load_config(_config(tmp_path, **doc))
        assert (list(binding.minors), list(binding.nodes)) == (config["minors"], config["role_nodes"])
