"""The registry of CI systems (observe.ci.systems): one detector, and every consumer reads the registry.

A fake CI system, written as a module of its own the way docs/ARCHITECTURE.md's recipe "Add a CI
system" says and registered through the same loading as the real ones, is seen by the recorder's fold
markers, the recorded environment, the OTLP attributes, the tracker's CI job and the verdict's
publishing, with no other file changed (the tracker's schema names its systems too: a migration,
which the recipe names and a test here compares with the registry).
"""

from __future__ import annotations

import ast
import json
import re
import sys
import types
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from gates.verdict import Check, Verdict
from observe import env as env_names
from observe.ci import systems
from observe.ci.publish import publish_verdict
from observe.ci.systems import CiJob, CiSystem, ci_job, detect, markers_for
from observe.interop.semconv import ci_attributes
from observe.secrets.envpolicy import NOT_RECORDED, recorded_env
from tests.gates.test_tests_recorded import PROJECT, project, pytest_gate
from tests.helpers.paths import ROOT
from tests.helpers.run import alpha
from tracker import records
from tracker.db import init

JOB = "https://ci.example/acme/lane/-/jobs/7"

#: A CI system of its own, as a module of observe/ci/systems/ would define it.
FAKE_MODULE = """
from observe.ci.systems import CiSystem


def _publish(p):
    p.echo(f"fake: {p.verdict.verdict} {p.summary}", True)


SYSTEM = CiSystem(
    name="fakeci",
    title="Fake CI",
    detects=lambda env: env.get("FAKE_CI") == "yes",
    nests=False,
    fold_open=lambda count, name: (f">>> {count} {name}\\n", ""),
    fold_close=lambda section, exit_code: f"<<< {exit_code}\\n",
    attributes=lambda get: {
        "cicd.pipeline.run.url.full": get("FAKE_CI_JOB"),
        "vcs.ref.head.revision": get("FAKE_CI_SHA"),
    },
    job_url="cicd.pipeline.run.url.full",
    recorded_names=frozenset({"FAKE_CI", "FAKE_CI_JOB"}),
    recorded_prefixes=("FAKE_CI_META_",),
    publish=_publish,
    summary_beside_stream=True,
)
"""

FAKE_ENV = {
    "FAKE_CI": "yes",
    "FAKE_CI_JOB": JOB,
    "FAKE_CI_SHA": "c0ffee",
    "FAKE_CI_META_STAGE": "test",
    "FAKE_CI_META_TOKEN": "s3cret",
}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> CiSystem:
    """The fake CI's module, as ``observe.ci.systems.fakeci``, appended to ``MODULES`` and loaded."""
    module = types.ModuleType(f"{systems.__name__}.fakeci")
    exec(compile(FAKE_MODULE, "fakeci.py", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(systems, "MODULES", (*systems.MODULES, "fakeci"))
    monkeypatch.setattr(systems, "SYSTEMS", systems.load(systems.MODULES))
    return module.SYSTEM


class TestOneDetector:
    @pytest.mark.parametrize(
        "env",
        [
            {"GITLAB_CI": "1", "CI_JOB_URL": JOB},
            {"GITLAB_CI": "yes", "CI_JOB_URL": JOB},
            {"GITLAB_CI": "true", "CI_JOB_URL": JOB},
            {"GITLAB_CI": "0", "CI_JOB_URL": JOB},
            {"BUILDKITE": "1", "BUILDKITE_BUILD_URL": JOB},
            {"BUILDKITE": "off", "BUILDKITE_BUILD_URL": JOB},
            {"GITHUB_ACTIONS": "true"},
            {"GITHUB_ACTIONS": "1"},
            {"CI": "true"},
            {},
        ],
    )
    def test_the_recorder_and_the_tracker_agree(self, tmp_path: Path, env: dict[str, str]) -> None:
        """The CI the recorder folds steps for is the CI the tracker records a run in (GITLAB_CI=1 is GitLab)."""
        conn = init(tmp_path / "t.sqlite3")
        try:
            run = records.start_run(conn, lane="exit-zero", environ=env)
            provider, url = conn.execute("SELECT ci_provider, ci_job_url FROM runs WHERE id = ?", (run,)).fetchone()
        finally:
            conn.close()
        markers = markers_for(env)
        assert (detect(env), detect(env)) == (provider, None if markers is None else markers.ci)
        assert (JOB if provider in ("gitlab", "buildkite") else None) == url


class TestARegisteredSystem:
    def test_is_detected(self, fake: CiSystem) -> None:
        """The detector asks every registered system; one that does not detect leaves the others."""
        assert ("fakeci", "gitlab", None) == (detect(FAKE_ENV), detect({"GITLAB_CI": "true"}), detect({}))

    def test_folds_steps_with_its_own_markers(self, fake: CiSystem) -> None:
        """Its markers, never another CI's (Buildkite's were the fallback of every unknown CI)."""
        markers = markers_for(FAKE_ENV)
        assert markers is not None
        assert (b">>> 1 build\n", b"", b"<<< 3\n") == (
            markers.begin("s1", "build"),
            markers.begin("s2", "inner"),  # it does not nest
            markers.end("s1", 3),
        )

    def test_its_variables_are_recorded(self, fake: CiSystem) -> None:
        """Its names and prefixes join the allow-list; a secret-looking name under its prefix stays out."""
        env = recorded_env({**FAKE_ENV, "FAKE_OTHER": "x"})
        unrecorded = {"FAKE_CI_SHA": NOT_RECORDED, "FAKE_CI_META_TOKEN": NOT_RECORDED, "FAKE_OTHER": NOT_RECORDED}
        assert {**FAKE_ENV, **unrecorded} == env

    def test_its_attributes_are_exported(self, fake: CiSystem) -> None:
        """The OTLP attributes are its own; a value the recorder did not record gives none (no KeyError)."""
        recorded = recorded_env(FAKE_ENV)
        assert {"cicd.pipeline.run.url.full": JOB} == ci_attributes(recorded)
        assert {"cicd.pipeline.run.url.full": JOB, "vcs.ref.head.revision": "c0ffee"} == ci_attributes(FAKE_ENV)

    def test_the_tracker_names_its_job(self, fake: CiSystem) -> None:
        """The tracker's CI job under it: its name, its job's URL and its commit (what `run start` records,
        once a tracker migration lets ``runs.ci_provider`` hold its name: ``TestTheTrackerSchema``)."""
        assert CiJob("fakeci", JOB, "c0ffee") == ci_job(FAKE_ENV)

    def test_a_verdict_is_published_to_it(self, fake: CiSystem, tmp_path: Path) -> None:
        """`gate`/`verdict` publishing: its summary beside the stream, then its own publish."""
        said: list[tuple[str, bool]] = []
        v = Verdict.of("g", "command", [Check("exit-code", "fail", "exited 1")])
        stream = tmp_path / "s.aos"
        ok = publish_verdict(v, stream=str(stream), stream_id="id", env=FAKE_ENV, echo=lambda t, e: said.append((t, e)))
        assert (True, [(f"fake: fail {stream}.md", True)]) == (ok, said)
        assert "gate g: FAIL" in (tmp_path / "s.aos.md").read_text()


#: The packages whose modules are scanned.
PACKAGES = ("aos", "gates", "observe", "tracker")


def _sources() -> Iterator[tuple[str, ast.AST]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text(encoding="utf-8"))


def misplaced(sources: Iterable[tuple[str, ast.AST]]) -> list[str]:
    """Each place outside a CI's module (and ``MODULES``) that spells its name, names its ``Vars`` class
    of observe/env.py, or imports its module."""
    found = []
    classes = [n for n in vars(env_names) if n.endswith("Vars")]
    for path, tree in sources:
        for system, module in zip(systems.SYSTEMS, systems.MODULES, strict=True):
            if path in {f"observe/ci/systems/{module}.py", "observe/ci/systems/__init__.py", "observe/env.py"}:
                continue
            own = {n for n in classes if n.lower().startswith(module)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and node.value == system.name:
                    found.append(f"{path}:{node.lineno} spells {system.name!r}")
                elif (isinstance(node, ast.Name) and node.id in own) or (
                    isinstance(node, ast.alias) and node.name in own
                ):
                    found.append(f"{path}:{node.lineno} uses {module}'s variables of observe.env")
                elif isinstance(node, ast.ImportFrom) and node.module == f"observe.ci.systems.{module}":
                    found.append(f"{path}:{node.lineno} imports observe.ci.systems.{module}")
    return sorted(set(found))


class TestOneModuleEach:
    def test_a_system_is_named_only_in_its_module(self) -> None:
        """No consumer spells a CI's name, reads its variables or imports its module: each would be a
        second place to change when a CI is added (docs/ARCHITECTURE.md, "Add a CI system")."""
        assert [] == misplaced(_sources())

    def test_the_scan_finds_a_consumer_that_knows_a_system(self) -> None:
        """Planted: a consumer comparing with a CI's name (main's gate.py did), reading its variables,
        importing its module."""
        source = (
            "from observe.env import BuildkiteVars\n"
            "from observe.ci.systems.gitlab import SYSTEM\n"
            'if detect(env) == "github":\n'
            "    print(BuildkiteVars.COMMIT)\n"
        )
        assert [
            "observe/cli/gate.py:1 uses buildkite's variables of observe.env",
            "observe/cli/gate.py:2 imports observe.ci.systems.gitlab",
            "observe/cli/gate.py:3 spells 'github'",
            "observe/cli/gate.py:4 uses buildkite's variables of observe.env",
        ] == misplaced([("observe/cli/gate.py", ast.parse(source))])

    def test_the_tracker_docs_list_every_system(self) -> None:
        """docs/TRACKER.md's table of CI jobs has one row per registered system, by name."""
        text = (ROOT / "docs" / "TRACKER.md").read_text(encoding="utf-8")
        rows = re.findall(r"^\| [^|]*\(`([a-z0-9]+)`\) \|", text, re.MULTILINE)
        assert [s.name for s in systems.SYSTEMS] == rows


class TestTheTrackerSchema:
    @pytest.mark.parametrize("folder", ["migrations", "migrations_pg"])
    def test_runs_ci_provider_holds_every_registered_system(self, folder: str) -> None:
        """The newest CHECK on ``runs.ci_provider`` (of both backends) names exactly the registered systems:
        a CI added without its tracker migration fails here, not at its first `run start`."""
        checks = [
            found
            for path in sorted((ROOT / "tracker" / folder).glob("*.sql"))
            for found in re.findall(r"ci_provider\s+IN\s*\(([^)]*)\)", path.read_text(encoding="utf-8"), re.I)
        ]
        assert checks, f"no CHECK on ci_provider in tracker/{folder}"
        assert sorted(s.name for s in systems.SYSTEMS) == sorted(re.findall(r"'([^']*)'", checks[-1]))


class TestVerdictUnderAnyCi:
    def test_the_summary_lists_the_failing_tests_with_json(self, tmp_path: Path) -> None:
        """`verdict --json` under Buildkite writes STREAM.md with the captured failing tests, as `gate` does
        (the verdict command read the captured files under GitHub only: a consumer that knew one CI)."""
        cwd = project(tmp_path, PROJECT)
        rc, out = pytest_gate(cwd)
        assert 1 == rc, out
        assert not (cwd / "s.aos.md").exists()  # not under CI the gate writes none: what is read is the verdict's
        p = alpha("observe", "verdict", "s.aos", "--json", cwd=cwd, env={"BUILDKITE": "true"})
        assert (1, "fail") == (p.returncode, json.loads(p.stdout)["verdict"])
        assert "test\\_calc\\.test\\_divides (test\\_calc\\.py\\:6)" in (cwd / "s.aos.md").read_text(encoding="utf-8")
