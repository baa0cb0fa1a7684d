"""The reference lane's learner (samples/lane) on its CPU path: oracle, resume, refusals."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers.paths import SAMPLES

LANE_DIR = SAMPLES / "lane"
sys.path.insert(0, str(LANE_DIR))

import oracle  # noqa: E402
from lanekit import checkpoint  # noqa: E402
from lanekit.build import build_role  # noqa: E402
from lanekit.device import host_binding  # noqa: E402
from lanekit.numeric import HostBackend  # noqa: E402
from lanekit.refusals import CheckpointChunk, PeerIdentity  # noqa: E402
from lanekit.role import owner_session, run_in_process  # noqa: E402
from lanekit.session import run_lane  # noqa: E402
from lanekit.spec import LANES, ROLES, default_spec  # noqa: E402
from lanekit.wire import Channel, WireError, compare_hello, hello  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def _build(folder: Path, lane: str, spec=None, **binding: object) -> dict[str, str]:
    spec = spec or default_spec(lane)
    return {role: build_role(spec, role, host_binding(**binding), folder)[0] for role in ROLES}


def _run(exes: dict[str, str], folder: Path, **kwargs: object):
    files = {k: str(folder / f"{k}.json") for k in ("checkpoint", "trajectory", "membership")}
    result = run_lane(
        exes,
        checkpoint_out=files["checkpoint"],
        trajectory_out=files["trajectory"],
        membership_out=files["membership"],
        timeout=60,
        **kwargs,
    )
    return result, files


def _hex_state(chunks: dict[str, list[float]]) -> dict[str, list[str]]:
    return {k: [v.hex() for v in vals] for k, vals in chunks.items()}


@pytest.fixture(scope="module")
def executables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    root = tmp_path_factory.mktemp("lane-exes")
    return {lane: _build(root / lane, lane) for lane in LANES}


class TestOracle:
    @pytest.mark.parametrize("lane", LANES)
    def test_in_process_matches_oracle(self, lane: str) -> None:
        """The learner's CPU path gives the oracle's trajectory bit for bit, update by update."""
        _chunks, rows = run_in_process(default_spec(lane))
        assert oracle.hex_rows(lane, 5) == rows

    @pytest.mark.parametrize("lane", LANES)
    def test_processes_match_oracle(self, lane: str, executables: dict[str, dict[str, str]], tmp_path: Path) -> None:
        """Three fresh processes over a Unix socket publish the oracle's checkpoint bit for bit."""
        result, files = _run(executables[lane], tmp_path, updates=5, epoch=1)
        assert result.ok, result.output
        step, chunks = checkpoint.load(files["checkpoint"])
        assert (5, _hex_state(oracle.trajectory(lane, 5)[-1])) == (step, _hex_state(chunks))
        trajectory = json.loads(Path(files["trajectory"]).read_text())
        assert oracle.hex_rows(lane, 5) == trajectory["rows"]

    def test_averaging_mutant_caught(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A coordinator that averages the owners' means instead of weighting by samples misses the oracle."""
        from lanekit.learner import Coordinator
        from lanekit.spec import unhexf

        def averaged(self: Coordinator, contributions: dict[str, dict[str, object]]) -> list[float]:
            means = [[unhexf(g) / float(c["n"]) for g in c["g"]] for c in contributions.values()]  # type: ignore[attr-defined,arg-type]
            return [(means[0][j] + means[1][j]) / 2.0 for j in range(2)]

        monkeypatch.setattr(Coordinator, "_combine", averaged)
        _chunks, rows = run_in_process(default_spec("partitioned"))
        assert oracle.hex_rows("partitioned", 5) != rows

    def test_unequal_split_is_weighted(self) -> None:
        """Owners hold one and two samples, and the combine weights by sample count, not by owner."""
        spec = default_spec("coordinates")
        assert ((0,), (1, 2)) == spec.split
        averaged = oracle.trajectory("coordinates", 1)[-1]["param"]
        assert averaged != [0.0, 0.0]


class TestResume:
    @pytest.mark.parametrize("lane", LANES)
    def test_resume_equals_uninterrupted(
        self, lane: str, executables: dict[str, dict[str, str]], tmp_path: Path
    ) -> None:
        """Three updates, a checkpoint and two more in fresh processes at epoch 2 end in the uninterrupted bytes."""
        full, full_files = _run(executables[lane], tmp_path / "full", updates=5, epoch=1)
        first, before = _run(executables[lane], tmp_path / "before", updates=3, epoch=1)
        second, after = _run(
            executables[lane],
            tmp_path / "after",
            updates=2,
            epoch=2,
            resume=before["checkpoint"],
            resume_membership=before["membership"],
        )
        assert full.ok
        assert first.ok
        assert second.ok
        assert Path(full_files["checkpoint"]).read_bytes() == Path(after["checkpoint"]).read_bytes()
        epochs = [json.loads(Path(f["membership"]).read_text())["epoch"] for f in (before, after)]
        assert [1, 2] == epochs

    def test_stale_epoch_refused(self, executables: dict[str, dict[str, str]], tmp_path: Path) -> None:
        """A resume that does not advance the membership epoch is refused before any owner trains."""
        exes = executables["partitioned"]
        first, before = _run(exes, tmp_path / "before", updates=3, epoch=1)
        second, after = _run(
            exes,
            tmp_path / "after",
            updates=2,
            epoch=1,
            resume=before["checkpoint"],
            resume_membership=before["membership"],
        )
        assert first.ok
        assert 24 == second.exit_codes["coordinator"]
        assert "refused: checkpoint-epoch:" in second.output["coordinator"]
        assert not os.path.exists(after["checkpoint"])

    @pytest.mark.parametrize("lane", ["coordinates", "independent"])
    def test_host_shadow_changes_nothing(
        self, lane: str, executables: dict[str, dict[str, str]], tmp_path: Path
    ) -> None:
        """Overwriting the owners' host shadows before every forward pass changes neither trajectory nor checkpoint."""
        plain, plain_files = _run(executables[lane], tmp_path / "plain", updates=5, epoch=1)
        shadow, shadow_files = _run(executables[lane], tmp_path / "shadow", updates=5, epoch=1, shadow=True)
        assert plain.ok
        assert shadow.ok
        for name in ("checkpoint", "trajectory"):
            assert Path(plain_files[name]).read_bytes() == Path(shadow_files[name]).read_bytes()
        owners = json.loads(Path(shadow_files["membership"]).read_text())["owners"]
        assert [5, 5] == [o["shadow_overwrites"] for o in owners]

    @pytest.mark.parametrize("lane", ["coordinates", "independent"])
    def test_host_shadow_control_has_teeth(self, lane: str, monkeypatch: pytest.MonkeyPatch) -> None:
        """A mutant owner that computes from its host shadow is caught by the control (its trajectory changes)."""
        from lanekit.learner import Owner

        def from_shadow(self: Owner) -> None:
            self.state = {name: [self.be.const(v) for v in values] for name, values in self.shadow.items()}

        for method in ("gradient", "advance_local"):
            original = getattr(Owner, method)

            def mutant(self: Owner, *args: object, _original=original) -> object:  # type: ignore[no-untyped-def]
                from_shadow(self)
                if args and self.spec.lane == "coordinates":
                    args = (list(self.state["param"]),)
                return _original(self, *args)

            monkeypatch.setattr(Owner, method, mutant)
        _chunks, plain = run_in_process(default_spec(lane))
        assert oracle.hex_rows(lane, 5) == plain
        try:
            _chunks, shadowed = run_in_process(default_spec(lane), shadow=True)
            caught = oracle.hex_rows(lane, 5) != shadowed
        except WireError as exc:  # the coordinator saw the replicas diverge
            caught = "diverged" in str(exc)
        assert caught


class TestRefusals:
    @pytest.mark.parametrize(
        ("override", "code", "name"),
        [
            ({"uuid": "HOST-wrong"}, 20, "device-uuid"),
            ({"product": "NVIDIA GeForce RTX 3070"}, 21, "nvidia-plan-host"),
        ],
    )
    def test_wrong_binding_refused_before_writing(
        self, override: dict[str, str], code: int, name: str, tmp_path: Path
    ) -> None:
        """A role built for the wrong UUID or product exits with the named refusal and writes nothing."""
        exes = _build(tmp_path / "exes", "coordinates", **override)
        result, _files = _run(exes, tmp_path / "run", updates=5, epoch=1)
        assert code == result.exit_codes["owner-0"]
        assert f"refused: {name}:" in result.output["owner-0"]
        assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())
        out = tmp_path / "eval.json"
        done = subprocess.run(
            [sys.executable, exes["owner-0"], "evaluate", "--checkpoint", str(out), "--output", str(out)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert (code, "") == (done.returncode, done.stdout)
        assert done.stderr.startswith(f"refused: {name}:")
        assert not out.exists()

    def test_corrupted_checkpoint_refused(self, executables: dict[str, dict[str, str]], tmp_path: Path) -> None:
        """A checkpoint with one flipped digit is refused as checkpoint-chunk, and no output is written."""
        result, files = _run(executables["independent"], tmp_path, updates=5, epoch=1)
        assert result.ok
        bad = tmp_path / "bad.json"
        bad.write_bytes(checkpoint.corrupt_bytes(Path(files["checkpoint"]).read_bytes()))
        out = tmp_path / "eval.json"
        done = subprocess.run(
            [
                sys.executable,
                executables["independent"]["owner-0"],
                "evaluate",
                "--checkpoint",
                str(bad),
                "--output",
                str(out),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert 22 == done.returncode
        assert done.stderr.startswith("refused: checkpoint-chunk:")
        assert not out.exists()
        resumed, after = _run(executables["independent"], tmp_path / "after", updates=2, epoch=2, resume=str(bad))
        assert 22 == resumed.exit_codes["coordinator"]
        assert not os.path.exists(after["checkpoint"])

    def test_nan_behind_repaired_checksum_refused(self) -> None:
        """A non-finite value whose chunk checksum was recomputed is still refused as checkpoint-chunk."""
        body = json.loads(checkpoint.encode("coordinates", "x", 1, {"param": [1.0, 0.0]}))
        body["chunks"][0]["values"][0] = float("nan").hex()
        body["chunks"][0]["sha256"] = checkpoint.chunk_sha256("param", [float("nan"), 0.0])
        data = json.dumps(body).encode()
        with pytest.raises(CheckpointChunk, match="non-finite"):
            checkpoint.parse(data)


class TestPeerIdentity:
    @pytest.mark.parametrize(
        ("change", "field"),
        [
            ({"momentum": 0.5}, "learner"),
            ({"rate": 0.1}, "rate"),
            ({"split": ((0, 1), (2,))}, "membership"),
        ],
    )
    def test_first_message_refused(self, change: dict[str, object], field: str) -> None:
        """A peer built for a different learner, rate or membership is refused on its hello."""
        spec = default_spec("coordinates")
        mine = hello(spec, "coordinator", 1)
        theirs = hello(spec.with_changes(**change), "owner-1", 1)
        with pytest.raises(PeerIdentity, match=f"owner-1 differs in {field}"):
            compare_hello(mine, theirs)

    def test_other_epoch_refused(self) -> None:
        """A peer of another membership epoch is refused on its hello."""
        spec = default_spec("partitioned")
        with pytest.raises(PeerIdentity, match="membership"):
            compare_hello(hello(spec, "coordinator", 2), hello(spec, "owner-0", 1))

    def test_refusal_reaches_the_peer(self) -> None:
        """The refused owner hears the refusal on the wire and fails with peer-identity too."""
        spec = default_spec("coordinates")
        a, b = socket.socketpair()
        errors: list[BaseException] = []

        def owner() -> None:
            try:
                owner_session(
                    spec.with_changes(rate=0.1), "owner-0", Channel(b, "coordinator"), HostBackend(), 1, False
                )
            except BaseException as exc:  # noqa: BLE001 - inspected below
                errors.append(exc)

        t = threading.Thread(target=owner)
        t.start()
        chan = Channel(a, "owner-0")
        theirs = chan.recv("hello")
        with pytest.raises(PeerIdentity) as refused:
            compare_hello(hello(spec, "coordinator", 1), theirs)
        chan.send({"type": "refused", "detail": refused.value.detail})
        t.join(10)
        assert isinstance(errors[0], PeerIdentity)

    def test_processes_refuse_other_rate(self, tmp_path: Path) -> None:
        """In real processes, an owner built for another rate is refused and no checkpoint is written."""
        exes = _build(tmp_path / "good", "coordinates")
        exes["owner-1"] = build_role(
            default_spec("coordinates").with_changes(rate=0.1), "owner-1", host_binding(), tmp_path / "other"
        )[0]
        result, files = _run(exes, tmp_path / "run", updates=5, epoch=1)
        assert 23 == result.exit_codes["coordinator"]
        assert "refused: peer-identity: owner-1 differs in rate" in result.output["coordinator"]
        assert 23 == result.exit_codes["owner-1"]
        assert not os.path.exists(files["checkpoint"])


def test_checkpoint_bytes_are_canonical() -> None:
    """Equal states encode to equal bytes, whatever the chunk insertion order."""
    a = checkpoint.encode("partitioned", "id", 5, {"param": [1.5, 2.0], "momentum": [0.25, -1.0]})
    b = checkpoint.encode("partitioned", "id", 5, {"momentum": [0.25, -1.0], "param": [1.5, 2.0]})
    assert hashlib.sha256(a).hexdigest() == hashlib.sha256(b).hexdigest()
