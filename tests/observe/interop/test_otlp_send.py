"""OTLP as receivers take it: binary protobuf, ``--endpoint``, CI/CD and VCS attributes, events inside spans.

The protobuf is checked by parsing it back with opentelemetry-proto; the POST
against small HTTP servers started here on 127.0.0.1 that answer as receivers
may (accept, reject some spans, redirect); the real receiver, Arize Phoenix, is
in tests/observe/interop/test_otlp_phoenix.py.
"""

from __future__ import annotations

import http.server
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

from gates.testing import SyntheticStream
from observe.cli.root import main
from tests.helpers.run import alpha
from tests.observe.interop.test_export import LANE, attrs, parse_otlp


def export(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["observe", "export", *args])
    return r.exit_code, r.stderr


def spans_of(req: Any) -> list[Any]:
    return list(req.resource_spans[0].scope_spans[0].spans)


@pytest.fixture(scope="module")
def lane(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """test_export's LANE recorded under exit-zero, as if in GitHub Actions; the command tries to forge its CI."""
    d = tmp_path_factory.mktemp("lane")
    forging = LANE + (
        "GITHUB_SHA=forged GITHUB_RUN_ID=0 alpha observe step forge -- true\n"
        "alpha observe receipt forged --field vcs.ref.head.revision=forged\n"
    )
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "octo/lane",
        "GITHUB_REPOSITORY_OWNER": "octo",
        "GITHUB_RUN_ID": "4242",
        "GITHUB_RUN_ATTEMPT": "2",
        "GITHUB_WORKFLOW": "ci",
        "GITHUB_JOB": "test",
        "GITHUB_SHA": "0123456789abcdef0123456789abcdef01234567",
        "GITHUB_REF": "refs/pull/17/merge",
        "GITHUB_REF_NAME": "17/merge",
        "GITHUB_HEAD_REF": "feature",
        "GITHUB_BASE_REF": "main",
        "GITHUB_REF_TYPE": "branch",
        "GITHUB_STEP_SUMMARY": str(d / "summary.md"),
        "GITHUB_OUTPUT": str(d / "output.txt"),
    }
    out = d / "lane.aos"
    proc = alpha(
        "observe",
        "gate",
        "exit-zero",
        "--quiet",
        "--out",
        str(out),
        "--",
        "sh",
        "-c",
        forging,
        cwd=d,
        env=env,
        timeout=120,
    )
    assert 0 == proc.returncode, proc.stderr
    return out


class TestProtobuf:
    def test_otlp_proto_is_the_json_as_protobuf(self, lane: Path, tmp_path: Path) -> None:
        """--format otlp-proto writes the ExportTraceServiceRequest the OTLP/JSON export describes (ids as bytes)."""
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        assert (0, 0) == (
            export(str(lane), "--format", "otlp", "-o", str(tmp_path / "t.json"))[0],
            export(str(lane), "--format", "otlp-proto", "-o", str(tmp_path / "t.pb"))[0],
        )
        from_json = parse_otlp((tmp_path / "t.json").read_text())
        from_proto = ExportTraceServiceRequest.FromString((tmp_path / "t.pb").read_bytes())
        assert from_json == from_proto
        assert 16 == len(spans_of(from_proto)[0].trace_id)

    def test_missing_opentelemetry_proto_is_a_usage_error(self, lane: Path, tmp_path: Path) -> None:
        """Without opentelemetry-proto, otlp-proto exits 2 naming the otlp extra, and writes nothing."""
        name = "opentelemetry.proto.collector.trace.v1.trace_service_pb2"
        saved = sys.modules.get(name)
        sys.modules[name] = None  # type: ignore[assignment]  # import now raises ImportError
        try:
            code, err = export(str(lane), "--format", "otlp-proto", "-o", str(tmp_path / "t.pb"))
        finally:
            if saved is not None:
                sys.modules[name] = saved
            else:
                del sys.modules[name]
        assert (2, False) == (code, (tmp_path / "t.pb").exists())
        from observe.util.install import install_hint

        assert install_hint("otlp") in err


class TestSemconv:
    def test_root_span_carries_cicd_and_vcs_attributes(self, lane: Path, tmp_path: Path) -> None:
        """The root span carries cicd.* and vcs.* from the recorded GitHub variables, not the command's forgeries."""
        export(str(lane), "--format", "otlp", "-o", str(tmp_path / "t.json"))
        root = next(s for s in spans_of(parse_otlp((tmp_path / "t.json").read_text())) if not s.parent_span_id)
        a = attrs(root.attributes)
        expected = {
            "cicd.pipeline.name": "ci",
            "cicd.pipeline.run.id": "4242",
            "cicd.pipeline.run.url.full": "https://github.com/octo/lane/actions/runs/4242/attempts/2",
            "cicd.pipeline.task.name": "test",
            "vcs.provider.name": "github",
            "vcs.repository.url.full": "https://github.com/octo/lane",
            "vcs.repository.name": "lane",
            "vcs.owner.name": "octo",
            "vcs.ref.head.revision": "0123456789abcdef0123456789abcdef01234567",
            "vcs.ref.head.name": "feature",
            "vcs.ref.head.type": "branch",
            "vcs.ref.base.name": "main",
            "vcs.change.id": "17",
            "cicd.pipeline.task.run.result": "success",  # the sealed verdict's, not a CI variable's
        }
        assert expected == {k: v for k, v in a.items() if k.startswith(("cicd.", "vcs."))}

    @pytest.mark.parametrize(
        ("code", "timed_out", "interrupted", "expected"),
        [
            (0, False, False, "success"),
            (1, False, False, "failure"),
            (None, False, False, "error"),
            (None, True, False, "timeout"),
            (None, False, True, "cancellation"),
        ],
    )
    def test_task_run_result_from_the_verdict(
        self, tmp_path: Path, code: int | None, timed_out: bool, interrupted: bool, expected: str
    ) -> None:
        """cicd.pipeline.task.run.result is the sealed verdict in the semantic conventions' values: pass success,
        fail failure, inconclusive error; a --timeout timeout, a signal during the command cancellation."""
        s = SyntheticStream(gate="exit-zero")
        if interrupted:
            s.add("recorder.interrupted", {"signal": "SIGTERM", "during": "command"})
        if code is not None or timed_out:
            s.exit(code if code is not None else None, signal="SIGKILL" if timed_out else None, timed_out=timed_out)
        s.add("verdict", s.evaluate("exit-zero").to_attrs())
        s.write(tmp_path / "s.aos")
        assert 0 == export(str(tmp_path / "s.aos"), "--format", "otlp", "-o", str(tmp_path / "t.json"))[0]
        root = next(x for x in spans_of(parse_otlp((tmp_path / "t.json").read_text())) if not x.parent_span_id)
        assert expected == attrs(root.attributes)["cicd.pipeline.task.run.result"]

    def test_no_verdict_no_task_run_result(self, tmp_path: Path) -> None:
        """A recording without a gate says nothing of the task run's result."""
        s = SyntheticStream()
        s.exit(0)
        s.write(tmp_path / "s.aos")
        assert 0 == export(str(tmp_path / "s.aos"), "--format", "otlp", "-o", str(tmp_path / "t.json"))[0]
        root = next(x for x in spans_of(parse_otlp((tmp_path / "t.json").read_text())) if not x.parent_span_id)
        assert "cicd.pipeline.task.run.result" not in attrs(root.attributes)

    @pytest.mark.parametrize(
        ("env", "expected"),
        [
            (
                {
                    "GITLAB_CI": "true",
                    "CI_PROJECT_PATH": "grp/proj",
                    "CI_PROJECT_URL": "https://ci-token:secret@gitlab.example/grp/proj",
                    "CI_PIPELINE_ID": "9",
                    "CI_JOB_ID": "90",
                    "CI_JOB_NAME": "unit",
                    "CI_COMMIT_SHA": "abc",
                    "CI_COMMIT_REF_NAME": "v1",
                    "CI_COMMIT_TAG": "v1",
                    "CI_MERGE_REQUEST_IID": "[NOT RECORDED]",
                },
                {
                    "cicd.pipeline.name": "grp/proj",
                    "cicd.pipeline.run.id": "9",
                    "cicd.pipeline.task.name": "unit",
                    "cicd.pipeline.task.run.id": "90",
                    "vcs.provider.name": "gitlab",
                    "vcs.repository.url.full": "https://gitlab.example/grp/proj",
                    "vcs.repository.name": "proj",
                    "vcs.ref.head.revision": "abc",
                    "vcs.ref.head.name": "v1",
                    "vcs.ref.head.type": "tag",
                },
            ),
            (
                {
                    "BUILDKITE": "true",
                    "BUILDKITE_PIPELINE_SLUG": "lane",
                    "BUILDKITE_BUILD_ID": "b-1",
                    "BUILDKITE_BUILD_URL": "https://buildkite.com/o/lane/builds/3",
                    "BUILDKITE_JOB_ID": "j-1",
                    "BUILDKITE_LABEL": ":test: unit",
                    "BUILDKITE_REPO": "git@github.com:o/lane.git",
                    "BUILDKITE_COMMIT": "def",
                    "BUILDKITE_BRANCH": "main",
                    "BUILDKITE_PULL_REQUEST": "false",
                },
                {
                    "cicd.pipeline.name": "lane",
                    "cicd.pipeline.run.id": "b-1",
                    "cicd.pipeline.run.url.full": "https://buildkite.com/o/lane/builds/3",
                    "cicd.pipeline.task.name": ":test: unit",
                    "cicd.pipeline.task.run.id": "j-1",
                    "cicd.pipeline.task.run.url.full": "https://buildkite.com/o/lane/builds/3#j-1",
                    "vcs.repository.url.full": "git@github.com:o/lane.git",
                    "vcs.ref.head.revision": "def",
                    "vcs.ref.head.name": "main",
                    "vcs.ref.head.type": "branch",
                },
            ),
            ({"CI": "true", "GITHUB_SHA": "abc"}, {}),
        ],
        ids=["gitlab", "buildkite", "no-known-ci"],
    )
    def test_other_ci_systems(self, tmp_path: Path, env: dict[str, str], expected: dict[str, str]) -> None:
        """GitLab and Buildkite variables map too (credentials dropped from URLs, unrecorded values skipped)."""
        s = SyntheticStream(env)
        s.exit(0)
        s.write(tmp_path / "s.aos")
        export(str(tmp_path / "s.aos"), "--format", "otlp", "-o", str(tmp_path / "t.json"))
        root = next(x for x in spans_of(parse_otlp((tmp_path / "t.json").read_text())) if not x.parent_span_id)
        assert expected == {k: v for k, v in attrs(root.attributes).items() if k.startswith(("cicd.", "vcs."))}


class TestEventsInsideSpans:
    def test_every_event_lies_inside_its_span(self, lane: Path, tmp_path: Path) -> None:
        """Each span event's time lies within its span (the checks, evaluated after the exit, at the root's end)."""
        export(str(lane), "--format", "otlp", "-o", str(tmp_path / "t.json"))
        spans = spans_of(parse_otlp((tmp_path / "t.json").read_text()))
        outside = [
            (s.name, e.name)
            for s in spans
            for e in s.events
            if not s.start_time_unix_nano <= e.time_unix_nano <= s.end_time_unix_nano
        ]
        assert [] == outside
        root = next(s for s in spans if not s.parent_span_id)
        checks = [e for e in root.events if e.name == "aos.check"]
        assert [root.end_time_unix_nano] == [e.time_unix_nano for e in checks]
        assert attrs(root.attributes)["aos.verdict.time_unix_nano"] > root.end_time_unix_nano


# -- --endpoint -------------------------------------------------------------------------------


class _Receiver(http.server.BaseHTTPRequestHandler):
    answer: ClassVar[tuple[int, dict[str, str], bytes]] = (200, {}, b"")
    got: ClassVar[list[tuple[str, str, bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).got.append((self.path, self.headers["Content-Type"], body))
        code, headers, answer = type(self).answer
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, type[_Receiver]]]:
    """An HTTP server on 127.0.0.1 answering each POST with ``handler.answer``, keeping what it got."""
    handler = type("Handler", (_Receiver,), {"got": [], "answer": (200, {}, b"")})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


class TestEndpoint:
    def test_posts_protobuf_to_v1_traces(self, lane: Path, receiver: tuple[str, type[_Receiver]]) -> None:
        """--endpoint BASE POSTs the protobuf to BASE/v1/traces as application/x-protobuf; -o is then optional."""
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        url, handler = receiver
        code, err = export(str(lane), "--format", "otlp-proto", "--endpoint", url)
        assert 0 == code, err
        ((path, ctype, body),) = handler.got
        assert ("/v1/traces", "application/x-protobuf") == (path, ctype)
        assert 5 == len(spans_of(ExportTraceServiceRequest.FromString(body)))  # the root and 4 steps
        assert f"POST {url}/v1/traces: HTTP 200" in err

    def test_json_goes_as_application_json_to_the_given_path(
        self, lane: Path, receiver: tuple[str, type[_Receiver]], tmp_path: Path
    ) -> None:
        """--format otlp sends the JSON as application/json; a URL with a path is used as given; -o also writes."""
        url, handler = receiver
        code, err = export(str(lane), "--format", "otlp", "--endpoint", f"{url}/otlp/traces", "-o", str(tmp_path / "t"))
        assert 0 == code, err
        ((path, ctype, body),) = handler.got
        assert ("/otlp/traces", "application/json", body) == (path, ctype, (tmp_path / "t").read_bytes())

    @pytest.mark.parametrize("answer", ["415", "partial", "redirect"])
    def test_a_receiver_that_does_not_take_it_is_output_write(
        self, lane: Path, receiver: tuple[str, type[_Receiver]], answer: str
    ) -> None:
        """An HTTP error, a partial success that rejected spans, or a redirect exit 1 with output-write."""
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        url, handler = receiver
        if answer == "415":
            handler.answer = (415, {}, b"Unsupported content type")
        elif answer == "partial":
            resp = ExportTraceServiceResponse()
            resp.partial_success.rejected_spans = 2
            resp.partial_success.error_message = "too old"
            handler.answer = (200, {"Content-Type": "application/x-protobuf"}, resp.SerializeToString())
        else:
            handler.answer = (307, {"Location": "http://127.0.0.1:1/v1/traces"}, b"")
        code, err = export(str(lane), "--format", "otlp-proto", "--endpoint", url)
        assert 1 == code
        expected = {"415": "HTTP 415", "partial": "rejected 2 spans: too old", "redirect": "HTTP 307"}[answer]
        assert err.startswith("refused: output-write: "), err
        assert expected in err
        assert 1 == len(handler.got)

    def test_nothing_listening_is_output_write(self, lane: Path) -> None:
        """A refused connection exits 1 with output-write naming the URL."""
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        code, err = export(str(lane), "--format", "otlp-proto", "--endpoint", f"http://127.0.0.1:{port}")
        assert 1 == code
        assert err.startswith(f"refused: output-write: POST http://127.0.0.1:{port}/v1/traces: ")

    @pytest.mark.parametrize(
        "args",
        [
            ["--format", "asciicast", "--endpoint", "http://127.0.0.1:9"],
            ["--format", "otlp-proto", "--endpoint", "ftp://127.0.0.1/"],
            ["--format", "otlp-proto"],
        ],
        ids=["not-traces", "not-http", "no-output"],
    )
    def test_usage_errors(self, lane: Path, args: list[str]) -> None:
        """--endpoint for a format that is not traces, a URL that is not http(s), or no output at all: exit 2."""
        assert 2 == export(str(lane), *args)[0]

    def test_stdout_json_unchanged(self, lane: Path) -> None:
        """-o - still writes the JSON to stdout (one document)."""
        r = CliRunner().invoke(main, ["observe", "export", str(lane), "--format", "otlp", "-o", "-"])
        assert 0 == r.exit_code
        assert "resourceSpans" in json.loads(r.stdout)
