"""`alpha tracker` and `alpha observe attach`: output, --json, refusals as `refused: NAME: detail`, exit 1."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.helpers.cli import invoke
from tracker.ids import is_run_id
from tracker.testing import example_tracker, flip_byte, sealed_stream


def tracker(db: Path | str, *args: str) -> Result:
    return invoke("tracker", "--db", str(db), *args)


@pytest.fixture
def db(tracker_db: str) -> str:
    """A tracker (each backend) with M1 and items N1 (implemented), N2 (needs N1), H1 (hardware, needs N2)."""
    path = tracker_db
    for args in (
        ["init"],
        ["milestone", "add", "M1", "Static lanes"],
        ["item", "add", "N1", "Build roles", "-m", "M1", "--status", "implemented"],
        ["item", "add", "N2", "Check roles", "-m", "M1", "-d", "N1"],
        ["item", "add", "H1", "Two GPUs", "-m", "M1", "--hardware", "-d", "N2"],
    ):
        result = tracker(path, *args)
        assert 0 == result.exit_code, result.output
    return path


class TestReads:
    def test_status_line(self, db: str) -> None:
        """`status` starts with the one-line summary, then one line per milestone."""
        result = tracker(db, "status")
        assert 0 == result.exit_code
        lines = result.stdout.splitlines()
        assert "3 work items across 1 milestone: 1 implemented, 2 planned; none verified" == lines[0]
        assert "  M1  Static lanes: 3 items: 1 implemented, 2 planned; none verified" == lines[1]

    def test_status_json(self, db: str) -> None:
        """`status --json` gives the counts."""
        data = json.loads(tracker(db, "status", "--json").stdout)
        assert {"planned": 2, "in-progress": 0, "implemented": 1, "verified": 0} == data["counts"]
        assert 3 == data["items"]

    def test_next(self, db: str) -> None:
        """`next` lists items whose dependencies are implemented or verified, not those still waiting."""
        assert ["N2"] == [i["id"] for i in json.loads(tracker(db, "next", "--json").stdout)]
        assert 0 == tracker(db, "item", "set", "N2", "--status", "implemented").exit_code
        result = tracker(db, "next")
        assert result.stdout.startswith("H1  [planned] Two GPUs (M1, hardware)")

    def test_show_item_and_run(self, db: str, tmp_path: Path) -> None:
        """`show` prints an item or a run with its evidence, as text or JSON."""
        run = tracker(db, "run", "start", "--lane", "distributed-device").stdout.strip()
        sealed_stream(tmp_path / "s.aos")
        assert 0 == invoke("observe", "attach", str(tmp_path / "s.aos"), "--tracker", str(db), "--run", run).exit_code
        shown = json.loads(tracker(db, "show", run, "--json").stdout)
        assert ("run", "running", 1) == (shown["type"], shown["state"], len(shown["evidence"]))
        assert "pass" == shown["evidence"][0]["verdict"]
        assert tracker(db, "show", run).stdout.startswith(f"run {run}: running\n")
        item = json.loads(tracker(db, "show", "H1", "--json").stdout)
        assert ("item", True, [{"id": "N2", "status": "planned"}]) == (
            item["type"],
            item["hardware"],
            item["depends_on"],
        )
        by_stream = json.loads(tracker(db, "show", shown["evidence"][0]["stream_id"][:12], "--json").stdout)
        assert "evidence" == by_stream["type"]

    def test_show_says_simulated(self, db: str, tmp_path: Path) -> None:
        """A run observed on a simulated observer's GPUs says so wherever `show` names them (as the site does)."""
        run = tracker(db, "run", "start", "--lane", "distributed-device").stdout.strip()
        gpu = "GPU-5e5e5e5e-0000-0000-0000-000000000001"
        sealed_stream(tmp_path / "s.aos", devices=[gpu])
        assert 0 == invoke("observe", "attach", str(tmp_path / "s.aos"), "--tracker", str(db), "--run", run).exit_code
        shown = tracker(db, "show", run).stdout
        assert f"observed on {gpu} (simulated: a test double, not hardware)" in shown, shown
        assert {gpu: "simulated"} == json.loads(tracker(db, "show", run, "--json").stdout)["evidence"][0]["observers"]

    def test_experiment_add_says_what_it_made(self, db: str) -> None:
        """`experiment add` names the experiment, its id and item, and how runs take it."""
        result = tracker(db, "experiment", "add", "E7", "--item", "N2")
        assert 0 == result.exit_code, result.output
        assert result.stdout.startswith("added experiment E7 (id "), result.stdout
        assert ", for work item N2); start its runs with: alpha tracker run start --experiment E7\n" in result.stdout

    def test_run_list_and_site_count_as_sentences(self, db: str, tmp_path: Path) -> None:
        """`run list` says "1 stream", `site` "1 run page, 1 stream report": never "(s)"."""
        run = tracker(db, "run", "start", "--lane", "distributed-device").stdout.strip()
        sealed_stream(tmp_path / "s.aos")
        assert 0 == invoke("observe", "attach", str(tmp_path / "s.aos"), "--tracker", str(db), "--run", run).exit_code
        listed = tracker(db, "run", "list").stdout
        assert f"{run}  running      distributed-device: 1 stream\n" == listed, listed
        site = tracker(db, "site", str(tmp_path / "site")).stdout
        assert "index.html, 1 run page, 1 stream report (" in site, site

    def test_lists_json(self, db: str) -> None:
        """`item list --json` and `run list --json` parse."""
        assert 3 == len(json.loads(tracker(db, "item", "list", "--json").stdout))
        run = tracker(db, "run", "start").stdout.strip()
        assert [run] == [r["id"] for r in json.loads(tracker(db, "run", "list", "--json").stdout)]


class TestRefusals:
    def test_physical_pass_without_physical_stream(self, db: str, tmp_path: Path) -> None:
        """Recording a physical pass with only a static stream prints the named refusal and exits 1."""
        run = tracker(db, "run", "start").stdout.strip()
        sealed_stream(tmp_path / "s.aos", scope="static")
        invoke("observe", "attach", str(tmp_path / "s.aos"), "--tracker", str(db), "--run", run)
        result = tracker(db, "run", "finish", run, "--state", "completed", "--physical-pass")
        assert 1 == result.exit_code
        assert result.stderr.startswith(f"refused: tracker-physical-pass: run {run}: ")
        assert json.loads(tracker(db, "show", run, "--json").stdout)["state"] == "running"

    def test_hardware_item_with_static_stream(self, db: str, tmp_path: Path) -> None:
        """Marking a hardware item verified with a static pass is refused, and links nothing."""
        run = tracker(db, "run", "start").stdout.strip()
        sealed_stream(tmp_path / "s.aos", scope="static")
        invoke("observe", "attach", str(tmp_path / "s.aos"), "--tracker", str(db), "--run", run)
        tracker(db, "run", "finish", run, "--state", "completed")
        result = tracker(db, "item", "set", "H1", "--status", "verified", "--run", run)
        assert 1 == result.exit_code
        assert result.stderr.startswith("refused: tracker-hardware-evidence: item H1: ")
        assert [] == json.loads(tracker(db, "show", "H1", "--json").stdout)["evidence"]

    def test_terminal_run(self, db: str) -> None:
        """Finishing a run twice is refused as tracker-run-immutable."""
        run = tracker(db, "run", "start").stdout.strip()
        assert 0 == tracker(db, "run", "finish", run, "--state", "failed").exit_code
        result = tracker(db, "run", "finish", run, "--state", "completed")
        assert 1 == result.exit_code
        assert result.stderr.startswith(f"refused: tracker-run-immutable: run {run}: ")

    def test_tampered_stream(self, db: str, tmp_path: Path) -> None:
        """Attaching a stream with a flipped byte prints the stream refusal and exits 1."""
        run = tracker(db, "run", "start").stdout.strip()
        sealed_stream(tmp_path / "s.aos")
        flip_byte(tmp_path / "s.aos")
        result = invoke("observe", "attach", str(tmp_path / "s.aos"), "--tracker", str(db), "--run", run)
        assert 1 == result.exit_code
        assert result.stderr.startswith("refused: stream-")

    def test_missing_tracker(self, new_tracker_db: Callable[[], str]) -> None:
        """Any command on a tracker that does not exist is refused as tracker-missing (and creates nothing)."""
        result = tracker(new_tracker_db(), "status")
        assert 1 == result.exit_code
        assert result.stderr.startswith("refused: tracker-missing: no tracker at ")

    def test_unknown_and_existing(self, db: str) -> None:
        """Unknown ids and taken ids are named refusals."""
        result = tracker(db, "show", "N99")
        assert (1, "refused: tracker-unknown: ") == (result.exit_code, result.stderr[:26])
        result = tracker(db, "item", "add", "N1", "again", "-m", "M1")
        assert (1, "refused: tracker-exists: ") == (result.exit_code, result.stderr[:25])
        result = tracker(db, "item", "set", "N1", "-d", "H1")
        assert (1, "refused: tracker-dependency-cycle: ") == (result.exit_code, result.stderr[:35])

    def test_usage_error(self, db: str) -> None:
        """A state that does not exist is a usage error (exit 2)."""
        assert 2 == tracker(db, "run", "finish", "1", "--state", "great").exit_code


class TestProcess:
    def test_run_start_prints_id_alone_and_refusal_exit(self, tracker_db: str) -> None:
        """In a real process, `run start` prints the run id alone on stdout; a refusal exits 1 with one stderr line."""
        db = tracker_db
        cmd = [sys.executable, "-c", "from observe.cli.root import main; main()"]
        subprocess.run([*cmd, "tracker", "--db", db, "init"], check=True, capture_output=True)
        started = subprocess.run(
            [*cmd, "tracker", "--db", db, "run", "start"], capture_output=True, text=True, check=True
        )
        run = started.stdout.strip()
        assert is_run_id(run)
        assert f"{run}\n" == started.stdout
        refused = subprocess.run(
            [*cmd, "tracker", "--db", db, "run", "finish", run, "--state", "completed", "--physical-pass"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert 1 == refused.returncode
        assert "" == refused.stdout
        assert 1 == len(refused.stderr.splitlines())
        assert refused.stderr.startswith("refused: tracker-physical-pass: ")


def test_example_tracker_status(tracker_db: str, tmp_path: Path) -> None:
    """The example tracker's status counts runs, physical passes and evidence."""
    t = example_tracker(tracker_db, tmp_path)
    t.conn.close()
    out = tracker(t.db, "status").stdout.splitlines()
    assert "3 runs: 1 running, 2 completed; 1 physical pass recorded" == out[3]
    assert "evidence: 1 pass (physical), 2 pass (static)" == out[4]
