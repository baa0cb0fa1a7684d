"""``export --endpoint`` against a real OTLP/HTTP receiver: Arize Phoenix, started once for this module on 127.0.0.1.

Phoenix (in the test extra) takes OTLP/HTTP protobuf at ``/v1/traces`` and
refuses OTLP/JSON with HTTP 415; what it stored is read back through its REST
API. It takes tens of seconds to start, hence one module-scoped server.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from aos.reader import read_stream
from observe.cli.root import main
from tests.helpers.eagain import retry_eagain
from tests.helpers.workers import PHOENIX
from tests.observe.interop.test_otlp_send import lane  # noqa: F401 - the recorded lane fixture, shared

pytestmark = PHOENIX

pytest.importorskip("phoenix", reason="arize-phoenix is not installed (pip install '.[test]')")

_START_S = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Phoenix server of its own (fresh working folder, free ports, no telemetry); its base URL."""
    d = tmp_path_factory.mktemp("phoenix")
    port = _free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(d),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(_free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = (d / "phoenix.log").open("wb")
    proc = retry_eagain(
        lambda: subprocess.Popen(
            [sys.executable, "-m", "phoenix.server.main", "serve"],
            cwd=d,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        ),
        "the Phoenix server",
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + _START_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"phoenix exited {proc.returncode}: {(d / 'phoenix.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"phoenix did not start in {_START_S} s: {(d / 'phoenix.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _stored_spans(base: str, trace_id: str, count: int) -> list[dict[str, Any]]:
    """The spans Phoenix stored for ``trace_id``. Ingestion is asynchronous and stores a trace's spans a few at a
    time (under load the root came alone): waits up to 60 s for ``count`` of them."""
    deadline = time.monotonic() + 60
    while True:
        data = _get(f"{base}/v1/projects/default/spans?limit=1000")["data"]
        spans = [s for s in data if s["context"]["trace_id"] == trace_id]
        if len(spans) >= count or time.monotonic() > deadline:
            return spans
        time.sleep(0.5)


def _ns(iso: str) -> int:
    t = datetime.datetime.fromisoformat(iso)
    return int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000


def test_phoenix_stores_the_protobuf_traces(phoenix: str, lane: Path) -> None:  # noqa: F811
    """Phoenix accepts the protobuf POST and stores every span, well parented, with its CI/VCS attributes."""
    r = CliRunner().invoke(main, ["observe", "export", str(lane), "--format", "otlp-proto", "--endpoint", phoenix])
    assert 0 == r.exit_code, r.stderr
    children = {"build", "inner", "check", "forge"}
    spans = _stored_spans(phoenix, read_stream(lane).stream_id, count=len(children) + 1)  # and the root
    by_name = {s["name"]: s for s in spans}
    assert children == set(by_name) - {s["name"] for s in spans if s["parent_id"] is None}
    (root,) = [s for s in spans if s["parent_id"] is None]
    assert by_name["build"]["context"]["span_id"] == by_name["inner"]["parent_id"]
    assert ("OK", "ERROR") == (by_name["build"]["status_code"], by_name["check"]["status_code"])
    assert ("0123456789abcdef0123456789abcdef01234567", "4242", "https://github.com/octo/lane") == (
        root["attributes"]["vcs.ref.head.revision"],
        root["attributes"]["cicd.pipeline.run.id"],
        root["attributes"]["vcs.repository.url.full"],
    )
    for s in spans:  # as Phoenix stored them (microseconds): each event inside its span
        start, end = _ns(s["start_time"]), _ns(s["end_time"])
        assert all(start <= _ns(e["timestamp"]) <= end for e in s["events"]), s["name"]
    assert ["exit-code"] == [e["attributes"]["aos.check.name"] for e in root["events"] if e["name"] == "aos.check"]


def test_phoenix_refuses_json_and_export_says_so(phoenix: str, lane: Path) -> None:  # noqa: F811
    """Phoenix answers OTLP/JSON with HTTP 415; export exits 1 with output-write naming it."""
    r = CliRunner().invoke(main, ["observe", "export", str(lane), "--format", "otlp", "--endpoint", phoenix])
    assert 1 == r.exit_code
    assert r.stderr.startswith(f"refused: output-write: POST {phoenix}/v1/traces: HTTP 415"), r.stderr
