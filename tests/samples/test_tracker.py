"""The worked example in samples/tracker runs, shows its refusals, and runs again in the same place."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers.paths import ROOT
from tests.helpers.run import child_env
from tests.helpers.workers import TWO_GPU_TRACKER

EXAMPLE = ROOT / "samples" / "tracker" / "example.sh"
TWO_GPU = ROOT / "samples" / "tracker" / "two_gpu.sh"
EVIDENCE = ROOT / "samples" / "evidence" / "two-gpu-h200"


def run_example(work: Path, script: Path = EXAMPLE) -> str:
    env = child_env()
    proc = subprocess.run(
        ["bash", str(script), str(work)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False
    )
    assert 0 == proc.returncode, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def test_worked_example(tmp_path: Path) -> None:
    """The example attaches a static pass; the tracker refuses a physical pass and a hardware verification with it."""
    work = tmp_path / "example"
    (work / "left-over").mkdir(parents=True)  # re-runnable in the same place: the script empties it first
    out = run_example(work)
    assert not (work / "left-over").exists()
    assert re.search(r"refused: tracker-physical-pass: run [0-9a-f]{8}-[0-9a-f-]{27}: ", out)
    assert "refused: tracker-hardware-evidence: item N10: " in out
    assert "4 work items across 2 milestones: 1 implemented, 2 planned; 1 verified" in out
    assert "audit: 1 stream: 1 intact, 0 changed, 0 missing; rules intact; journal intact" in out
    conn = sqlite3.connect(work / "progress.sqlite3")
    try:
        assert [("completed", 0)] == conn.execute("SELECT state, physical_pass FROM runs").fetchall()
        assert [("pass", "static", "distributed-device")] == conn.execute(
            "SELECT verdict, scope, gate FROM evidence"
        ).fetchall()
        statuses = dict(conn.execute("SELECT id, status FROM items").fetchall())
        assert {"N1": "implemented", "N2": "verified", "N10": "planned", "N11": "planned"} == statuses
    finally:
        conn.close()
    readme = (EXAMPLE.parent / "README.md").read_text()
    assert "bash samples/tracker/example.sh" in readme


@TWO_GPU_TRACKER
def test_two_gpu_example(two_gpu_tracker: tuple[Path, str]) -> None:
    """The passing H200 streams give each lane's run a physical pass; runs holding only a control get none."""
    work, out = two_gpu_tracker  # the script empties its folder first: a second run starts as the first did
    assert 3 == len(re.findall(r"^run [0-9a-f-]{36}: completed; physical pass recorded$", out, re.M))
    assert 2 == len(re.findall(r"^refused: tracker-physical-pass: run [0-9a-f-]{36}: ", out, re.M))
    assert 2 == out.count("refused: tracker-evidence-required: item N11: ")
    assert "5 runs: 3 completed, 1 failed, 1 inconclusive; 3 physical passes recorded" in out
    assert "evidence: 1 fail (physical), 1 inconclusive (physical), 6 pass (physical)" in out
    assert "audit: 8 streams: 8 intact, 0 changed, 0 missing; rules intact" in out
    conn = sqlite3.connect(work / "progress.sqlite3")
    try:
        # Runs in the order they were registered (UUIDv7 ids sort by registration time); each was
        # registered with the device session's declared start, before every stream it holds.
        runs = conn.execute("SELECT id, state, physical_pass, lane, started_at FROM runs ORDER BY id").fetchall()
        assert [
            ("completed", 1, "distributed-device"),
            ("completed", 1, "coordinate-device"),
            ("completed", 1, "independent-device"),
            ("failed", 0, "coordinate-device"),
            ("inconclusive", 0, "coordinate-device"),
        ] == [r[1:4] for r in runs]
        assert {"2026-11-30T13:16:00.000Z"} == {r[4] for r in runs}
        number = {r[0]: i for i, r in enumerate(runs, 1)}
        evidence = sorted(
            (number[run], path, verdict, scope, gate)
            for run, path, verdict, scope, gate in conn.execute(
                "SELECT run_id, path, verdict, scope, gate FROM evidence"
            ).fetchall()
        )
        expected = [
            (run, str(EVIDENCE / folder / f"{gate}.aos"), verdict, "physical", gate)
            for run, gate in ((1, "distributed-device"), (2, "coordinate-device"), (3, "independent-device"))
            for folder, verdict in (("forward", "pass"), ("swapped", "pass"))
        ]
        expected += [
            (
                4,
                str(EVIDENCE / "control-visible-swap" / "coordinate-device.aos"),
                "fail",
                "physical",
                "coordinate-device",
            ),
            (
                5,
                str(EVIDENCE / "control-busy" / "coordinate-device.aos"),
                "inconclusive",
                "physical",
                "coordinate-device",
            ),
        ]
        assert expected == evidence
        statuses = dict(conn.execute("SELECT id, status FROM items").fetchall())
        assert {"N10": "verified", "N11": "verified", "N12": "verified"} == statuses
        # the refused verifications left no link to a control stream behind
        linked = conn.execute(
            "SELECT DISTINCT e.run_id FROM item_evidence l JOIN evidence e ON e.id = l.evidence_id"
        ).fetchall()
        assert [1, 2, 3] == sorted(number[r[0]] for r in linked)
        devices = conn.execute("SELECT product, uuid, driver FROM devices ORDER BY id").fetchall()
        assert [
            ("NVIDIA H200", "GPU-bb5a03ab-c28f-2074-5197-3838b9dd4798", "580.159.04"),
            ("NVIDIA H200", "GPU-275f8d7e-27b9-87cf-bff1-529752b689a5", "580.159.04"),
        ] == devices
    finally:
        conn.close()
    readme = (TWO_GPU.parent / "README.md").read_text()
    assert "bash samples/tracker/two_gpu.sh" in readme


TWO_RUNNERS = ROOT / "samples" / "tracker" / "two_runners.sh"


def _two_runners(work: Path, extra_env: dict[str, str]) -> str:
    env = child_env()
    env.update(extra_env)
    proc = subprocess.run(
        ["bash", str(TWO_RUNNERS), str(work)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert 0 == proc.returncode, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def _audited_from_the_store(out: str, work: Path, store: str) -> None:
    assert 2 == len(re.findall(r"^attached stream [0-9a-f]{32} to run [0-9a-f-]{36}: verdict pass", out, re.M))
    assert 2 == out.count(f"  {store}/")  # audit names each stream by its store URL
    assert "audit: 2 streams: 2 intact, 0 changed, 0 missing; rules intact; journal intact" in out
    # the runners deleted their streams and the auditor never had one: only the store holds them
    left = [p for p in work.rglob("*.aos") if "store" not in p.relative_to(work).parts]
    assert [] == left


def test_two_runners_s3_and_postgresql(tmp_path: Path, s3_bucket: Any, pg_server: Any) -> None:
    """Two runners push to S3 (the suite's S3-compatible server); a PostgreSQL tracker attaches by URL;
    a third folder with no local copy audits from the store."""
    work = tmp_path / "two-runners"
    store = f"{s3_bucket.url}/ci"
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    env.update(ALPHA_STORE=store, ALPHA_TRACKER_DB=pg_server.create_database("two_runners_s3"))
    out = _two_runners(work, env)
    assert "tracker: postgresql://" in out
    _audited_from_the_store(out, work, store)
    # and the objects are really there, named by their BLAKE3
    keys = [o["Key"] for o in s3_bucket.client.list_objects_v2(Bucket=s3_bucket.name).get("Contents", [])]
    streams = [k for k in keys if not k.startswith("ci/index/")]
    assert 2 == len(streams)
    assert all(re.fullmatch(r"ci/[0-9a-f]{64}\.aos", k) for k in streams)
    # each push indexed its stream (docs/FORMAT.md section 8)
    from observe.store import open_store
    from observe.store_index import read_index

    rows, _ = read_index(open_store(store))
    assert sorted(f"s3://{s3_bucket.name}/{k}" for k in streams) == sorted(rows.column("url").to_pylist())


def test_two_runners_defaults(tmp_path: Path, pg_server: Any) -> None:
    """With nothing configured, the example starts its own PostgreSQL server and uses a folder store."""
    work = tmp_path / "two-runners"
    out = _two_runners(work, {})
    assert "tracker: postgresql://" in out
    _audited_from_the_store(out, work, f"file://{work.resolve()}/store")
