"""Fleet sessions recorded by the real tool on this machine (processes, no SSH): sealed, verified offline from
their files alone, by the library, the CLI and the independent verifier of tests/aos/test_session_format.py;
each tampering caught and named; the "did not run / not proven" set exact."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from aos.signing import generate_keypair, load_public_key
from observe.session.verify import verify_session
from tests.aos.test_session_format import independent_session_check
from tests.helpers.refusals import refused
from tests.helpers.run import alpha

GIB = 1 << 30
QUIET = ("--quiet", "--sample-interval", "0.2")


def _gpus(node: int) -> dict[str, Any]:
    """Two simulated GPUs of their own for node ``node``."""
    return {
        "driver": "580.159.04",
        "gpus": [
            {"index": i, "minor": i, "uuid": f"GPU-{node:04d}-{i}", "name": "NVIDIA H200", "memory": 141 * GIB}
            for i in range(2)
        ],
    }


def _key(tmp: Path, label: str) -> Path:
    """The key pair ``tmp/keys/LABEL.key`` and ``.pub`` (made once, as a user provisions one per node with
    ``alpha observe keygen``); return the private key's path."""
    (tmp / "keys").mkdir(exist_ok=True)
    private = tmp / "keys" / f"{label}.key"
    if not private.exists():
        generate_keypair(tmp / "keys" / label)
    return private


def _spec(tmp: Path, name: str, members: list[dict[str, Any]], prefix: str = "", **top: Any) -> Path:
    """A spec in ``tmp``: each member without a ``key`` gets ``keys/PREFIXNAME.pub`` (made now) unless ``top``
    says ``unsigned``."""
    for m in members:
        if "key" not in m and not top.get("unsigned"):
            _key(tmp, prefix + m["name"])
            m["key"] = f"keys/{prefix}{m['name']}.pub"
    path = tmp / name
    path.write_text(json.dumps({"origin": "example.com/fleet", "members": members, **top}))
    return path


def _script(tmp: Path, name: str, body: str) -> Path:
    path = tmp / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _node_line(
    tmp: Path, name: str, index: int, command: str = "echo hello from $0", key: str | None = "", prefix: str = ""
) -> str:
    """A launcher line that starts node ``name``'s recorder in the background, its GPUs simulated, signing with
    its own key ``keys/PREFIXNAME.key`` (``key`` another label's; None: no key)."""
    gpus = tmp / f"gpus-{index}.json"
    gpus.write_text(json.dumps(_gpus(index)))
    sign = "" if key is None else f"--sign-key {_key(tmp, key or prefix + name)} "
    return (
        f"ALPHA_OBSERVE_SIMULATED_GPUS={gpus} alpha observe node {name} {sign}{' '.join(QUIET)} -- "
        f"sh -c '{command}' &\n"
    )


def session_run(spec: Path, folder: Path, launcher: Path, *opts: str, cwd: Path, timeout: float = 120) -> Any:
    """``alpha observe session run SPEC --dir FOLDER OPTS --quiet -- LAUNCHER`` in ``cwd``, as text."""
    return alpha(
        "observe", "session", "run", str(spec), "--dir", str(folder), *opts, *QUIET, "--", str(launcher),
        cwd=cwd, text=True, timeout=timeout,
    )  # fmt: skip


def _raw(pub: Path) -> bytes:
    return load_public_key(pub).public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _statuses(directory: Path) -> dict[str, str]:
    return {m.path: m.status for m in verify_session(directory).not_proven}


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return generate_keypair(tmp_path_factory.mktemp("keys") / "session")


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory, keys: tuple[Path, Path]) -> Path:
    """A signed session of four nodes: n0 and n1 seal, n2's recorder is killed before it seals, n3 never starts."""
    tmp = tmp_path_factory.mktemp("four")
    spec = _spec(tmp, "spec.json", [{"name": f"n{i}", "gpus": 2, "roles": [f"owner-{i}"]} for i in range(4)])
    body = _node_line(tmp, "n0", 0) + _node_line(tmp, "n1", 1) + _node_line(tmp, "n2", 2, "sleep 20")
    body += 'kill2=$!\nwhile [ ! -s "$ALPHA_FLEET_DIR/nodes/.n2.aos.partial" ]; do sleep 0.1; done\nsleep 0.5\n'
    body += "kill -KILL $kill2\nwait\n"
    launcher = _script(tmp, "launch.sh", body)
    proc = session_run(spec, tmp / "S", launcher, "--sign-key", str(keys[0]), cwd=tmp)
    assert 3 == proc.returncode, proc.stderr
    return tmp / "S"


class TestTwoNodes:
    """A session of two nodes verifies offline from its files alone."""

    def test_two_nodes_seal_and_verify_offline(self, tmp_path: Path, keys: tuple[Path, Path]) -> None:
        """Both nodes proven, the checkpoint signed; a copy of the folder verifies by the CLI and independently."""
        spec = _spec(tmp_path, "spec.json", [{"name": "n0", "gpus": 2}, {"name": "n1", "gpus": 2}])
        # the launcher outlives its nodes by a second: the session takes each stream as it seals
        body = _node_line(tmp_path, "n0", 0) + _node_line(tmp_path, "n1", 1) + "wait\nsleep 1\n"
        launcher = _script(tmp_path, "launch.sh", body)
        proc = session_run(spec, tmp_path / "S", launcher, "--sign-key", str(keys[0]), cwd=tmp_path)
        assert 0 == proc.returncode, proc.stderr
        from aos.reader import iter_events

        taken = [ev.attrs for ev in iter_events(tmp_path / "S" / "session.aos") if ev.kind == "session.member"]
        assert [("n0", "sealed"), ("n1", "sealed")] == sorted((a["name"], a["at"]) for a in taken)
        offline = tmp_path / "elsewhere"
        shutil.copytree(tmp_path / "S", offline)
        shutil.rmtree(tmp_path / "S")
        proc = alpha("observe", "session", "verify", str(offline), "--key", str(keys[1]), "--json", text=True)
        assert 0 == proc.returncode, proc.stderr
        doc = json.loads(proc.stdout)
        assert (2, True) == (doc["size"], doc["signed"])
        assert [("n0", "proven"), ("n1", "proven")] == [(m["path"], m["status"]) for m in doc["members"]]
        assert {"n0", "n1"} == independent_session_check(offline, _raw(keys[1]))

    def test_each_node_observed_its_own_gpus(self, tmp_path: Path) -> None:
        """Each node's stream holds its own simulated GPUs, and the session's stream its expected set."""
        from aos.reader import iter_events

        spec = _spec(tmp_path, "spec.json", [{"name": "a", "gpus": 2, "roles": ["owner-0", "owner-1"]}, {"name": "b"}])
        launcher = _script(
            tmp_path, "launch.sh", _node_line(tmp_path, "a", 7) + _node_line(tmp_path, "b", 8) + "wait\n"
        )
        proc = session_run(spec, tmp_path / "S", launcher, cwd=tmp_path)
        assert 0 == proc.returncode, proc.stderr
        for name, index in (("a", 7), ("b", 8)):
            seen = {
                g["uuid"]
                for ev in iter_events(tmp_path / "S" / "nodes" / f"{name}.aos")
                if ev.kind == "device.observed"
                for g in ev.attrs["gpus"]
            }
            assert {f"GPU-{index:04d}-0", f"GPU-{index:04d}-1"} == seen
        opened = [ev.attrs for ev in iter_events(tmp_path / "S" / "session.aos") if ev.kind == "session.open"]
        assert [("a", 2, ["owner-0", "owner-1"]), ("b", None, [])] == [
            (m["name"], m["gpus"], m["roles"]) for m in opened[0]["members"]
        ]


class TestMissingAndTampered:
    """Each member that did not run, was killed before sealing, was edited or swapped is caught and named."""

    def test_did_not_run_set_is_exact(self, four: Path, keys: tuple[Path, Path]) -> None:
        """n2 (killed before its seal) is not proven, unsealed; n3 did not run; nothing else is named."""
        report = verify_session(four, load_public_key(keys[1]))
        assert {"n2": "not-proven", "n3": "did-not-run"} == {m.path: m.status for m in report.not_proven}
        n2 = next(m for m in report.not_proven if m.path == "n2")
        assert "stream-unsealed" in (n2.reason or "")
        assert 3 == report.exit_code
        assert {"n0", "n1"} == independent_session_check(four, _raw(keys[1]))

    def test_a_node_stream_edited_after_sealing(self, four: Path, tmp_path: Path) -> None:
        """One byte of n1's sealed stream changed: n1 is named, changed since the session sealed; exit 1."""
        copy = tmp_path / "S"
        shutil.copytree(four, copy)
        stream = copy / "nodes" / "n1.aos"
        data = bytearray(stream.read_bytes())
        data[len(data) // 2] ^= 0x01
        stream.write_bytes(bytes(data))
        report = verify_session(copy)
        changed = [m for m in report.members if not m.sealed]
        assert ["n1"] == [m.path for m in changed]
        assert 1 == report.exit_code
        assert {"n0"} == independent_session_check(copy)
        proc = alpha("observe", "session", "verify", str(copy), text=True)
        assert 1 == proc.returncode
        assert "not-proven (since the session sealed): n1:" in proc.stdout

    def test_a_node_stream_swapped_for_another_sessions(self, four: Path, tmp_path: Path) -> None:
        """n0's stream replaced by the n0 of another session, signed by n0's own key: named as belonging to that
        session (the right key is not enough: the labels must name this session and member)."""
        other = tmp_path / "other"
        other.mkdir()
        shutil.copytree(four.parent / "keys", other / "keys")  # the same node, the same key, another session
        spec = _spec(other, "spec.json", [{"name": "n0"}])
        launcher = _script(other, "launch.sh", _node_line(other, "n0", 9) + "wait\n")
        proc = session_run(spec, other / "S", launcher, cwd=other)
        assert 0 == proc.returncode, proc.stderr
        copy = tmp_path / "S"
        shutil.copytree(four, copy)
        shutil.copyfile(other / "S" / "nodes" / "n0.aos", copy / "nodes" / "n0.aos")
        report = verify_session(copy)
        n0 = next(m for m in report.members if m.path == "n0")
        assert (n0.status, n0.sealed) == ("not-proven", False)
        assert "it names session 'example.com/fleet/" in (n0.reason or "")
        assert {"n1"} == independent_session_check(copy)

    def test_a_node_stream_swapped_for_another_member(self, four: Path, tmp_path: Path) -> None:
        """n1's stream put in n0's place: it names member n1, so n0 is not proven."""
        copy = tmp_path / "S"
        shutil.copytree(four, copy)
        shutil.copyfile(copy / "nodes" / "n1.aos", copy / "nodes" / "n0.aos")
        assert {"n0": "not-proven", "n2": "not-proven", "n3": "did-not-run"} == _statuses(copy)
        n0 = next(m for m in verify_session(copy).members if m.path == "n0")
        assert "is not signed by the key the session declared for n0" in (n0.reason or "")

    def test_a_path_that_names_no_member_is_refused(self, four: Path) -> None:
        """``--member`` naming no member (or a node as if it were a rack) is refused, never an empty pass."""
        assert ["n1"] == [m.path for m in verify_session(four, None, "n1").members]
        for path in ("n9", "n1/n0", ""):
            assert "stream-proof" == refused(verify_session, four, None, path).name

    def test_a_proof_swapped(self, four: Path, tmp_path: Path) -> None:
        """n1's proof file in n0's place does not reach the checkpoint for n0."""
        copy = tmp_path / "S"
        shutil.copytree(four, copy)
        shutil.copyfile(copy / "proofs" / "n1.proof", copy / "proofs" / "n0.proof")
        report = verify_session(copy)
        assert ["n0"] == [m.path for m in report.members if not m.sealed]
        assert set() == {"n0"} & independent_session_check(copy)

    def test_the_checkpoint_edited_or_signed_by_another_key(self, four: Path, tmp_path: Path) -> None:
        """A checkpoint file that is not the sealed note, or a key that did not sign it: refused by name."""
        copy = tmp_path / "S"
        shutil.copytree(four, copy)
        other = generate_keypair(tmp_path / "other")
        assert "stream-signature" == refused(verify_session, copy, load_public_key(other[1])).name
        note = (copy / "checkpoint").read_bytes()
        (copy / "checkpoint").write_bytes(note.replace(b"\n2\n", b"\n3\n", 1))
        assert "stream-proof" == refused(verify_session, copy).name
        proc = alpha("observe", "session", "verify", str(copy), text=True)
        assert (1, "refused: stream-proof:") == (proc.returncode, proc.stderr[:22])


@pytest.fixture(scope="module")
def forged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """n0 honest; n1 recorded with no key (unsigned); n2 recorded with n0's key; all three labelled right (the
    launcher's environment gives any process the origin); the session sealed over them."""
    tmp = tmp_path_factory.mktemp("forged")
    spec = _spec(tmp, "spec.json", [{"name": f"n{i}", "gpus": 2} for i in range(3)])
    body = _node_line(tmp, "n0", 0) + _node_line(tmp, "n1", 1, key=None) + _node_line(tmp, "n2", 2, key="n0")
    proc = session_run(spec, tmp / "S", _script(tmp, "launch.sh", body + "wait\n"), cwd=tmp)
    assert 3 == proc.returncode, proc.stderr
    assert "session member n1: not-proven:" in proc.stderr
    assert "session member n2: not-proven:" in proc.stderr
    return tmp / "S"


class TestForgedMembers:
    """A member's labels are its stream's own claim: only the key the session declared for it proves it came from
    its recorder. Each forgery here is a stream whose labels name this session and member."""

    def test_unsigned_and_another_members_key_are_not_proven(self, forged: Path) -> None:
        """n1 (unsigned) and n2 (signed by n0's key) are not proven, each named with why; n0 is proven; the
        labels of both forgeries are right, so only the key tells them apart."""
        from aos.reader import iter_events

        for name in ("n1", "n2"):
            labels = next(iter_events(forged / "nodes" / f"{name}.aos")).attrs["labels"]
            assert name == labels["aos.session.member"]
        report = verify_session(forged)
        assert {"n1": "not-proven", "n2": "not-proven"} == {m.path: m.status for m in report.not_proven}
        reasons = {m.path: m.reason or "" for m in report.not_proven}
        assert "nodes/n1.aos is not signed by the key the session declared for n1" in reasons["n1"]
        assert "is not signed, and a key was given" in reasons["n1"]
        assert "nodes/n2.aos is not signed by the key the session declared for n2" in reasons["n2"]
        assert "names key" in reasons["n2"]
        assert {"n0"} == independent_session_check(forged)
        proc = alpha("observe", "session", "gate", str(forged), "--gate", "exit-zero", text=True)
        assert 3 == proc.returncode
        assert ["member:n1", "member:n2"] == [line.split(": ")[1] for line in proc.stdout.splitlines()[1:]]

    def test_a_forgery_put_in_after_the_seal(self, forged: Path, tmp_path: Path) -> None:
        """n0's sealed stream replaced, after the session sealed, by an unsigned one labelled n0 of this session:
        verify re-checks the key from the files alone and names n0 as changed since; exit 1."""
        from aos.reader import iter_events

        origin = next(ev for ev in iter_events(forged / "session.aos") if ev.kind == "session.open").attrs["origin"]
        fake = tmp_path / "fake"
        done = alpha("observe", "node", "n0", "--session-dir", str(fake), "--origin", origin, *QUIET, "--", "true")
        assert 0 == done.returncode, done.stderr
        copy = Path(shutil.copytree(forged, tmp_path / "S"))
        shutil.copyfile(fake / "nodes" / "n0.aos", copy / "nodes" / "n0.aos")
        report = verify_session(copy)
        n0 = next(m for m in report.members if m.path == "n0")
        assert (n0.status, n0.sealed) == ("not-proven", False)
        assert "is not signed by the key the session declared for n0" in (n0.reason or "")
        assert 1 == report.exit_code
        assert set() == independent_session_check(copy)

    def test_an_honest_signed_session_passes(self, tmp_path: Path) -> None:
        """Every node signs with its own declared key: every member proven by its key, the gate passes (exit 0)."""
        spec = _spec(tmp_path, "spec.json", [{"name": f"n{i}", "gpus": 2} for i in range(2)])
        body = _node_line(tmp_path, "n0", 0) + _node_line(tmp_path, "n1", 1) + "wait\n"
        proc = session_run(spec, tmp_path / "S", _script(tmp_path, "launch.sh", body), cwd=tmp_path)
        assert 0 == proc.returncode, proc.stderr
        report = verify_session(tmp_path / "S")
        keys = {m.path: m.key_id for m in report.members}
        assert keys == {f"n{i}": load_public_key(tmp_path / "keys" / f"n{i}.pub").key_id for i in range(2)}
        proc = alpha("observe", "session", "gate", str(tmp_path / "S"), "--gate", "exit-zero", text=True)
        assert 0 == proc.returncode, proc.stdout
        assert proc.stdout.startswith("pass")


class TestUnsignedSessions:
    """A spec without keys: refused by name unless it opts in, and then never better than inconclusive."""

    def test_a_spec_without_keys_is_refused(self, tmp_path: Path) -> None:
        """No key for n1 and no opt-in: refused as session-unsigned, exit 2, naming n1, the launcher not run."""
        spec = tmp_path / "spec.json"
        _key(tmp_path, "n0")
        spec.write_text(json.dumps({"members": [{"name": "n0", "key": "keys/n0.pub"}, {"name": "n1"}]}))
        proc = alpha("observe", "session", "run", str(spec), "--dir", str(tmp_path / "S"), "--", "touch",
                     str(tmp_path / "ran"), text=True)  # fmt: skip
        assert (2, "refused: session-unsigned:") == (proc.returncode, proc.stderr[:26])
        assert "no public key declared for n1:" in proc.stderr
        assert not (tmp_path / "ran").exists()

    @pytest.mark.parametrize(
        ("key", "why"),
        [("keys/none.pub", "key:"), ("spec.json", "key:"), ("keys/n0.key", "key:"), ("keys/n0.pub", "one key")],
    )
    def test_bad_keys_are_refused(self, tmp_path: Path, key: str, why: str) -> None:
        """A missing key file, one that is not a key, a private key for a public one, one key for two members."""
        _key(tmp_path, "n0")
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({"members": [{"name": "n0", "key": "keys/n0.pub"}, {"name": "n1", "key": key}]}))
        proc = alpha("observe", "session", "run", str(spec), "--dir", str(tmp_path / "S"), "--", "true", text=True)
        assert (2, "refused: session-spec:") == (proc.returncode, proc.stderr[:22])
        assert why in proc.stderr

    def test_an_unsigned_session_is_at_best_inconclusive(self, tmp_path: Path) -> None:
        """``"unsigned": true`` and no keys: run, verify and gate exit 3 naming both members unsigned, though each
        node sealed, verifies and is labelled right."""
        spec = _spec(tmp_path, "spec.json", [{"name": "n0", "gpus": 2}, {"name": "n1", "gpus": 2}], unsigned=True)
        body = _node_line(tmp_path, "n0", 0, key=None) + _node_line(tmp_path, "n1", 1, key=None) + "wait\n"
        proc = session_run(spec, tmp_path / "S", _script(tmp_path, "launch.sh", body), cwd=tmp_path)
        assert 3 == proc.returncode, proc.stderr
        assert "session member n0: unsigned" in proc.stderr
        report = verify_session(tmp_path / "S")
        assert (["n0", "n1"], [], 3) == ([m.path for m in report.unsigned], report.not_proven, report.exit_code)
        proc = alpha("observe", "session", "verify", str(tmp_path / "S"), text=True)
        assert 3 == proc.returncode
        assert "  unsigned: n0:" in proc.stdout
        proc = alpha("observe", "session", "gate", str(tmp_path / "S"), "--gate", "exit-zero", text=True)
        assert 3 == proc.returncode
        assert "inconclusive: member:n1: unsigned: the session declared no key for it" in proc.stdout
        assert {"n0", "n1"} == independent_session_check(tmp_path / "S")


@pytest.mark.slow
class TestSixteenNodes:
    """Sixteen nodes as four sub-sessions of four: nested sessions, verified whole and along one path."""

    def test_sixteen_nodes_in_four_racks(self, tmp_path: Path, keys: tuple[Path, Path]) -> None:
        """All 20 members proven; one path walks two members; the independent verifier agrees."""
        top = _spec(tmp_path, "top.json", [{"name": f"rack-{r}", "session": True} for r in range(4)])
        for r in range(4):
            _spec(tmp_path, f"rack-{r}.json", [{"name": f"n{i}", "gpus": 2} for i in range(4)], f"rack-{r}-")
            body = "".join(_node_line(tmp_path, f"n{i}", 4 * r + i, prefix=f"rack-{r}-") for i in range(4))
            _script(tmp_path, f"rack-{r}.sh", body + "wait\n")
        racks = "".join(
            f"alpha observe session run {tmp_path}/rack-{r}.json --member rack-{r} --sign-key "
            f"{_key(tmp_path, f'rack-{r}')} {' '.join(QUIET)} -- {tmp_path}/rack-{r}.sh &\n"
            for r in range(4)
        )
        launcher = _script(tmp_path, "top.sh", racks + "wait\n")
        proc = session_run(top, tmp_path / "S", launcher, "--sign-key", str(keys[0]), cwd=tmp_path, timeout=300)
        assert 0 == proc.returncode, proc.stderr
        report = verify_session(tmp_path / "S", load_public_key(keys[1]))
        assert (0, 20) == (report.exit_code, len(report.members))
        one = verify_session(tmp_path / "S", None, "rack-2/n3")
        assert ["rack-2", "rack-2/n3"] == [m.path for m in one.members]
        proven = independent_session_check(tmp_path / "S", _raw(keys[1]))
        assert {f"rack-{r}/n{i}" for r in range(4) for i in range(4)} | {f"rack-{r}" for r in range(4)} == proven


class TestNestedKilled:
    """A sub-session whose coordinator is killed before its seal is named, and its rack is not walked."""

    def test_a_rack_killed_before_its_seal(self, tmp_path: Path) -> None:
        """rack-1's coordinator killed: rack-1 is not proven (never sealed); rack-0 and its node are proven."""
        top = _spec(tmp_path, "top.json", [{"name": "rack-0", "session": True}, {"name": "rack-1", "session": True}])
        for r in range(2):
            _spec(tmp_path, f"rack-{r}.json", [{"name": "n0"}], f"rack-{r}-")
        _script(tmp_path, "rack-0.sh", _node_line(tmp_path, "n0", 0, prefix="rack-0-") + "wait\n")

        def run(r: int) -> str:
            rack = f"{tmp_path}/rack-{r}.json --sign-key {_key(tmp_path, f'rack-{r}')}"
            return f"alpha observe session run {rack} {' '.join(QUIET)} --member rack-{r}"

        body = f"{run(0)} -- {tmp_path}/rack-0.sh\n{run(1)} -- sleep 2 &\nr1=$!\n"
        body += 'while [ ! -s "$ALPHA_FLEET_DIR/sessions/rack-1/.session.aos.partial" ]; do sleep 0.1; done\n'
        body += "sleep 0.5\nkill -KILL $r1\nsleep 2\n"
        launcher = _script(tmp_path, "top.sh", body)
        proc = session_run(top, tmp_path / "S", launcher, cwd=tmp_path)
        assert 3 == proc.returncode, proc.stderr
        report = verify_session(tmp_path / "S")
        assert [("rack-0", "proven"), ("rack-0/n0", "proven"), ("rack-1", "not-proven")] == [
            (m.path, m.status) for m in report.members
        ]
        assert "it never sealed: sessions/rack-1/.session.aos.partial: stream-unsealed" in (
            report.members[2].reason or ""
        )
        assert {"rack-0", "rack-0/n0"} == independent_session_check(tmp_path / "S")


class TestSpec:
    """A session's expected set and a member's place are checked before anything runs."""

    def test_over_the_fanout_is_refused(self, tmp_path: Path) -> None:
        """65 members: refused as session-spec, exit 2, nothing recorded."""
        spec = _spec(tmp_path, "spec.json", [{"name": f"n{i}"} for i in range(65)])
        proc = alpha("observe", "session", "run", str(spec), "--dir", str(tmp_path / "S"), "--", "true", text=True)
        assert (2, "refused: session-spec:") == (proc.returncode, proc.stderr[:22])
        assert "nest sessions" in proc.stderr
        assert not (tmp_path / "S").exists()

    @pytest.mark.parametrize(
        "members",
        [[{"name": "../x"}], [{"name": "a"}, {"name": "a"}], [{"name": "a", "gpus": -1}], [], [{"name": ".hidden"}]],
    )
    def test_bad_members_are_refused(self, tmp_path: Path, members: list[dict[str, Any]]) -> None:
        """A path for a name, a repeated name, a negative GPU count, no member, a hidden name: session-spec."""
        spec = _spec(tmp_path, "spec.json", members)
        proc = alpha("observe", "session", "run", str(spec), "--dir", str(tmp_path / "S"), "--", "true", text=True)
        assert (2, "refused: session-spec:") == (proc.returncode, proc.stderr[:22])

    def test_a_session_is_never_recorded_over_another(self, tmp_path: Path) -> None:
        """A folder that holds a sealed session: refused as out-exists, exit 2, the launcher not run."""
        spec = _spec(tmp_path, "spec.json", [{"name": "n0"}])
        first = alpha("observe", "session", "run", str(spec), "--dir", str(tmp_path / "S"), *QUIET, "--", "true")
        assert 3 == first.returncode  # n0 never ran
        before = (tmp_path / "S" / "session.aos").read_bytes()
        again = alpha("observe", "session", "run", str(spec), "--dir", str(tmp_path / "S"), "--", "touch", "ran")
        assert (2, b"refused: out-exists:") == (again.returncode, again.stderr[:20])
        assert before == (tmp_path / "S" / "session.aos").read_bytes()
        assert not (tmp_path / "ran").exists()

    def test_a_node_outside_a_session_is_refused(self, tmp_path: Path) -> None:
        """``alpha observe node`` with no session folder or origin: refused, the command not run."""
        proc = alpha("observe", "node", "n0", "--", "touch", str(tmp_path / "ran"), text=True)
        assert (2, "refused: session-spec:") == (proc.returncode, proc.stderr[:22])
        assert not (tmp_path / "ran").exists()


class TestGate:
    """A gate over a recorded session, offline from its folder."""

    def test_missing_nodes_make_it_inconclusive_naming_them(self, four: Path, keys: tuple[Path, Path]) -> None:
        """n0 and n1 pass exit-zero with their two GPUs each; n2 and n3 are named inconclusive; exit 3."""
        proc = alpha("observe", "session", "gate", str(four), "--gate", "exit-zero", "--key", str(keys[1]), text=True)
        assert 3 == proc.returncode, proc.stderr
        named = [line.split(": ")[1] for line in proc.stdout.splitlines()[1:]]
        assert ["member:n2", "member:n3"] == named

    def test_two_nodes_sharing_a_gpu_fail(self, tmp_path: Path) -> None:
        """Two nodes whose recorders observed the same GPU: devices-distinct fails, naming both."""
        spec = _spec(tmp_path, "spec.json", [{"name": "n0", "gpus": 2}, {"name": "n1", "gpus": 2}])
        launcher = _script(
            tmp_path, "launch.sh", _node_line(tmp_path, "n0", 5) + _node_line(tmp_path, "n1", 5) + "wait\n"
        )
        proc = session_run(spec, tmp_path / "S", launcher, cwd=tmp_path)
        assert 0 == proc.returncode, proc.stderr
        proc = alpha("observe", "session", "gate", str(tmp_path / "S"), "--gate", "exit-zero", text=True)
        assert 1 == proc.returncode
        assert "fail: devices-distinct: a GPU was observed by two members: GPU-0005-0 by n0 and n1" in proc.stdout


@pytest.fixture(scope="module")
def racks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two racks of two nodes; rack-0/n1 and rack-1/n0 observed the same two GPUs (simulated index 7)."""
    tmp = tmp_path_factory.mktemp("racks")
    top = _spec(tmp, "top.json", [{"name": f"rack-{r}", "session": True} for r in range(2)])
    for r, indices in enumerate(((0, 7), (7, 1))):
        _spec(tmp, f"rack-{r}.json", [{"name": f"n{i}", "gpus": 2} for i in range(2)], f"rack-{r}-")
        body = "".join(_node_line(tmp, f"n{i}", index, prefix=f"rack-{r}-") for i, index in enumerate(indices))
        _script(tmp, f"rack-{r}.sh", body + "wait\n")
    racks = "".join(
        f"alpha observe session run {tmp}/rack-{r}.json --member rack-{r} --sign-key {_key(tmp, f'rack-{r}')} "
        f"{' '.join(QUIET)} -- {tmp}/rack-{r}.sh &\n"
        for r in range(2)
    )
    launcher = _script(tmp, "top.sh", racks + "wait\n")
    proc = alpha("observe", "session", "run", str(top), "--dir", str(tmp / "S"), *QUIET, "--", str(launcher),
                 cwd=tmp, text=True, timeout=300)  # fmt: skip
    assert 0 == proc.returncode, proc.stderr
    return tmp / "S"


class TestGpuLists:
    """Each session level seals its members' GPUs sorted; ``devices-distinct`` merges them level by level."""

    def test_each_level_seals_its_gpus_sorted(self, racks: Path) -> None:
        """Each rack lists its nodes' GPUs, the top session every rack's under its name, sorted (the duplicate kept:
        the gate names it); the independent verifier checks every list against its seal."""
        assert 6 == len(independent_session_check(racks))
        rack = [line.split("\t") for line in (racks / "sessions" / "rack-1" / "gpus").read_text().splitlines()]
        assert [["GPU-0001-0", "n1"], ["GPU-0001-1", "n1"], ["GPU-0007-0", "n0"], ["GPU-0007-1", "n0"]] == rack
        top = [tuple(line.split("\t")) for line in (racks / "gpus").read_text().splitlines()]
        assert sorted(top) == top
        assert 8 == len(top)
        assert ("GPU-0007-0", "rack-0/n1") in top
        assert ("GPU-0007-0", "rack-1/n0") in top

    def test_a_gpu_in_two_racks_is_caught_and_named(self, racks: Path) -> None:
        """The same GPU observed in rack-0 and in rack-1: caught at the top level's merge, both paths named."""
        proc = alpha("observe", "session", "gate", str(racks), "--gate", "exit-zero", text=True)
        assert 1 == proc.returncode, proc.stdout + proc.stderr
        assert (
            "fail: devices-distinct: a GPU was observed by two members: GPU-0007-0 by rack-0/n1 and rack-1/n0; "
            "GPU-0007-1 by rack-0/n1 and rack-1/n0"
        ) in proc.stdout

    def test_an_edited_gpu_list_is_named(self, racks: Path, tmp_path: Path) -> None:
        """A rack's sealed list edited (the duplicate dropped): the rack is not proven since the session sealed it;
        the top's list edited: the session itself is refused."""
        copy = Path(shutil.copytree(racks, tmp_path / "S"))
        rack = copy / "sessions" / "rack-1" / "gpus"
        rack.write_text("".join(line + "\n" for line in rack.read_text().splitlines() if "GPU-0007" not in line))
        report = verify_session(copy)
        assert 1 == report.exit_code
        assert [("rack-1", "not-proven")] == [(m.path, m.status) for m in report.not_proven]
        assert "sessions/rack-1/gpus is not the GPU list the session sealed" in str(report.not_proven[0].reason)
        assert {"rack-0", "rack-0/n0", "rack-0/n1"} == independent_session_check(copy)  # from FORMAT.md alone
        (copy / "gpus").write_text("")
        with pytest.raises(AssertionError):
            independent_session_check(copy)
        exc = refused(verify_session, copy)
        assert "stream-proof" == exc.name
        assert "gpus is not the GPU list the session sealed" in str(exc)
