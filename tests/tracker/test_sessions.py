"""A fleet session attached to a run: the tracker and the site say what has run, on what, and what has not.

Real sessions recorded by the tool (processes of this machine, simulated GPUs), attached on both backends
(the ``tracker_backend`` fixture): every expected member recorded as verified from the folder, a physical
pass refused while any is not proven, the rows written once.
"""

from __future__ import annotations

import json
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from aos.refusals import Refusal
from aos.signing import generate_keypair
from tests.helpers.backends import integrity_errors
from tests.helpers.cli import Cli
from tests.helpers.run import alpha
from tracker import records
from tracker.backends import Connection
from tracker.db import init
from tracker.sessions import attach_session
from tracker.testing import flip_byte, sealed_stream

GIB = 1 << 30


def _session(tmp: Path, started: list[str], expected: list[str], signed: bool = True) -> Path:
    """Record a session of ``expected`` nodes whose launcher starts only ``started``, each node with a key of its
    own (``signed``; else a spec of ``"unsigned": true`` and no keys); return its folder."""
    spec = tmp / "spec.json"
    for name in expected if signed else []:  # a key pair per node, as a user provisions them
        generate_keypair(tmp / name)
    members = [{"name": n, "gpus": 1, **({"key": f"{n}.pub"} if signed else {})} for n in expected]
    spec.write_text(json.dumps({"origin": "example.com/fleet", "members": members, "unsigned": not signed}))
    body = "#!/bin/sh\n"
    for i, name in enumerate(started):
        sign = f"--sign-key {tmp / name}.key " if signed else ""
        gpus = tmp / f"gpus-{name}.json"
        gpu = {"index": 0, "minor": 0, "uuid": f"GPU-{tmp.name}-{i}", "name": "NVIDIA H200", "memory": 141 * GIB}
        gpus.write_text(json.dumps({"driver": "580.159.04", "gpus": [gpu]}))
        body += f"ALPHA_OBSERVE_SIMULATED_GPUS={gpus} alpha observe node {name} {sign}--quiet -- echo on {name} &\n"
    launcher = tmp / "launch.sh"
    launcher.write_text(body + "wait\n")
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
    proc = alpha("observe", "session", "run", str(spec), "--dir", str(tmp / "S"), "--quiet", "--", str(launcher),
                 cwd=tmp, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == (0 if started == expected and signed else 3), proc.stderr
    return tmp / "S"


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``partial``: n0 and n1 sealed, n2 never started; ``whole``: n0 and n1 both sealed; ``unsigned``: n0 and n1
    sealed, the spec declaring no key (``"unsigned": true``)."""
    return {
        "partial": _session(tmp_path_factory.mktemp("partial"), ["n0", "n1"], ["n0", "n1", "n2"]),
        "whole": _session(tmp_path_factory.mktemp("whole"), ["n0", "n1"], ["n0", "n1"]),
        "unsigned": _session(tmp_path_factory.mktemp("unsigned"), ["n0", "n1"], ["n0", "n1"], signed=False),
    }


def _copy(sessions: dict[str, Path], which: str, tmp: Path) -> Path:
    return Path(shutil.copytree(sessions[which], tmp / which))


def _physical_run(conn: Connection, tmp: Path) -> str:
    """A running run with a sealed physical pass attached (so only its sessions decide a physical pass)."""
    from tracker.attach import attach

    run = records.start_run(conn, lane="distributed-device")
    sealed_stream(tmp / "physical.aos", verdict="pass", scope="physical")
    attach(conn, tmp / "physical.aos", run)
    return run


def _members(conn: Connection, run: str) -> dict[str, str]:
    rows = conn.execute("SELECT member, status FROM session_members WHERE run_id = ? ORDER BY position", (run,))
    return {str(r[0]): str(r[1]) for r in rows.fetchall()}


class TestAttach:
    def test_members_recorded_and_physical_pass_refused(
        self, conn: Connection, sessions: dict[str, Path], tmp_path: Path
    ) -> None:
        """The expected set exact: n0 and n1 proven, n2 did not run, named with the reason; a physical pass is
        refused by name while n2 is not proven, and a plain SQL update is refused by the database too."""
        run = _physical_run(conn, tmp_path)
        s = attach_session(conn, _copy(sessions, "partial", tmp_path), run)
        assert s.new
        assert s.evidence is None
        assert {"n0": "proven", "n1": "proven", "n2": "did-not-run"} == _members(conn, run)
        assert ["n2"] == [m["member"] for m in s.not_proven]
        assert "no stream at nodes/n2.aos" in s.not_proven[0]["reason"]
        with pytest.raises(Refusal) as info:
            records.finish_run(conn, run, "completed", physical_pass=True)
        assert "tracker-session-unproven" == info.value.name
        with pytest.raises(integrity_errors(), match=r"^tracker-session-unproven: "):
            conn.execute(
                "UPDATE runs SET state = 'completed', physical_pass = 1, finished_at = 'x' WHERE id = ?", (run,)
            )
        records.finish_run(conn, run, "completed")  # without a physical pass, the run completes

    def test_whole_session_allows_physical_pass(
        self, conn: Connection, sessions: dict[str, Path], tmp_path: Path
    ) -> None:
        """Every member proven (by folder and by its session.aos alike): the physical pass is recorded."""
        run = _physical_run(conn, tmp_path)
        folder = _copy(sessions, "whole", tmp_path)
        s = attach_session(conn, folder / "session.aos", run)
        assert not s.not_proven
        assert {"n0": "proven", "n1": "proven"} == _members(conn, run)
        records.finish_run(conn, run, "completed", physical_pass=True)

    def test_unsigned_members_are_not_proven_here(
        self, conn: Connection, sessions: dict[str, Path], tmp_path: Path
    ) -> None:
        """Every node sealed but the session declared no key: each recorded not-proven, unsigned, named; a physical
        pass refused (nothing shows their streams came from their recorders)."""
        run = _physical_run(conn, tmp_path)
        s = attach_session(conn, _copy(sessions, "unsigned", tmp_path), run)
        assert {"n0": "not-proven", "n1": "not-proven"} == _members(conn, run)
        assert all(m["reason"].startswith("unsigned: ") for m in s.not_proven)
        with pytest.raises(Refusal) as info:
            records.finish_run(conn, run, "completed", physical_pass=True)
        assert "tracker-session-unproven" == info.value.name

    def test_written_once(self, conn: Connection, sessions: dict[str, Path], tmp_path: Path) -> None:
        """Attached again unchanged: nothing new; to another run: refused; a member's stream edited since: the
        re-attach is refused (its status would change); rows are never edited or removed."""
        run = records.start_run(conn, lane="distributed-device")
        folder = _copy(sessions, "whole", tmp_path)
        attach_session(conn, folder, run)
        assert not attach_session(conn, folder, run).new
        other = records.start_run(conn, lane="distributed-device")
        with pytest.raises(Refusal) as info:
            attach_session(conn, folder, other)
        assert "tracker-stream-attached" == info.value.name
        flip_byte(folder / "nodes" / "n1.aos")
        with pytest.raises(Refusal) as info:
            attach_session(conn, folder, run)
        assert "tracker-stream-changed" == info.value.name
        for sql in ("UPDATE session_members SET status = 'proven'", "DELETE FROM session_members"):
            with pytest.raises(integrity_errors(), match=r"^tracker-evidence-immutable: "):
                conn.execute(sql)
        assert {"n0": "proven", "n1": "proven"} == _members(conn, run)
        records.finish_run(conn, run, "completed")
        with pytest.raises(Refusal) as info:
            attach_session(conn, _copy(sessions, "partial", tmp_path), run)
        assert "tracker-run-immutable" == info.value.name

    def test_not_a_session(self, conn: Connection, tmp_path: Path) -> None:
        """A folder that holds no session is refused, and nothing is recorded."""
        run = records.start_run(conn, lane="distributed-device")
        (tmp_path / "empty").mkdir()
        with pytest.raises(Refusal) as info:
            attach_session(conn, tmp_path / "empty", run)
        assert "stream-missing" == info.value.name  # no session.aos in it
        assert {} == _members(conn, run)


class TestShown:
    def test_cli_show_status_and_site(
        self, cli: Cli, tracker_db: str, sessions: dict[str, Path], tmp_path: Path
    ) -> None:
        """`alpha observe attach DIR`, `tracker show RUN`, `tracker status` and the run's site page each list the
        members proven and name the one that did not run."""
        c = init(tracker_db)
        run = records.start_run(c, lane="distributed-device")
        c.close()
        folder = _copy(sessions, "partial", tmp_path)
        out = cli("observe", "attach", str(folder), "--db", tracker_db, "--run", run)
        assert 0 == out.exit_code, out.output
        assert "2 of 3 members proven" in out.output
        assert "did-not-run: n2: no stream at nodes/n2.aos" in out.output
        show = cli("tracker", "--db", tracker_db, "show", run).output
        assert "2 of 3 members proven, 1 did not run or not proven" in show
        assert "proven: n0, n1" in show
        assert "did-not-run: n2: " in show
        status = cli("tracker", "--db", tracker_db, "status").output
        assert "session members: 2 proven, 1 did not run or not proven (1 did-not-run)" in status
        assert f"run {run}: session " in status
        assert ": did-not-run: n2: " in status
        assert 0 == cli("tracker", "--db", tracker_db, "site", str(tmp_path / "site")).exit_code
        page = next((tmp_path / "site" / "runs").glob("*.html")).read_text()
        assert 'data-member="n2" data-status="did-not-run" data-now="did-not-run"' in page
        assert 'data-member="n0" data-status="proven" data-now="proven"' in page
        flip_byte(folder / "nodes" / "n0.aos")  # the site verifies the folder again: n0 no longer proven
        assert 0 == cli("tracker", "--db", tracker_db, "site", str(tmp_path / "site")).exit_code
        page = next((tmp_path / "site" / "runs").glob("*.html")).read_text()
        assert 'data-member="n0" data-status="proven" data-now="not-proven"' in page


class TestImport:
    def test_import_verifies_each_session_again(
        self, new_tracker_db: Callable[[], str], sessions: dict[str, Path], tmp_path: Path
    ) -> None:
        """`import` carries a run's session members over, each folder verified again; a folder changed since
        (a member's stream edited) is refused (the source's audit names the member), nothing written."""
        from tracker.importing import import_tracker

        source, target, other = new_tracker_db(), new_tracker_db(), new_tracker_db()
        src = init(source)
        run = records.start_run(src, lane="distributed-device")
        folder = _copy(sessions, "partial", tmp_path)
        attach_session(src, folder, run)
        src.close()
        dst = init(target)
        result = import_tracker(dst, source)
        assert 3 == result.added["session_members"]
        assert {"n0": "proven", "n1": "proven", "n2": "did-not-run"} == _members(dst, run)
        dst.close()
        flip_byte(folder / "nodes" / "n0.aos")
        dst = init(other)
        with pytest.raises(Refusal) as info:
            import_tracker(dst, source)
        assert "tracker-import" == info.value.name
        assert "members no longer as recorded: n0" in str(info.value)  # the source's own audit names it
        assert {} == _members(dst, run)
        dst.close()


class TestAudit:
    def test_audit_verifies_each_session_again(
        self, conn: Connection, sessions: dict[str, Path], tmp_path: Path
    ) -> None:
        """`audit` verifies an attached session's folder again: ok as attached; a member's stream edited since:
        changed, the member named; the folder gone: missing."""
        from tracker.audit import audit

        run = records.start_run(conn, lane="distributed-device")
        folder = _copy(sessions, "partial", tmp_path)
        s = attach_session(conn, folder, run)
        report = audit(conn)
        assert report.ok, report.streams
        assert 1 == report.tally["ok"]
        flip_byte(folder / "nodes" / "n1.aos")
        report = audit(conn)
        found = [f for f in report.streams if f.stream_id == f"session:{s.origin}"]
        assert [("changed", ["n1"])] == [(f.state, f.columns) for f in found]
        shutil.rmtree(folder)
        report = audit(conn)
        assert ["missing"] == [f.state for f in report.streams if f.stream_id == f"session:{s.origin}"]
