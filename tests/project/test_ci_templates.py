"""docs/CI.md's jobs, action.yml and the GitLab template run as written, against the suite's own S3 and PostgreSQL."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from aos.signing import generate_keypair
from tests.helpers.ci_runner import GitHubJob, expand, read_outputs, run_gitlab, yaml_blocks
from tests.helpers.paths import ROOT
from tests.helpers.run import child_env

CI_MD = (ROOT / "docs" / "CI.md").read_text(encoding="utf-8")
_SHA_PIN = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40}$")


def _workflow_text() -> str:
    return next(b for b in re.findall(r"```yaml\n(.*?)```", CI_MD, flags=re.S) if "\njobs:" in b)


def _workflow() -> dict[str, Any]:
    return dict(yaml.safe_load(_workflow_text()))


def _gitlab_job() -> dict[str, Any]:
    return next(b for b in yaml_blocks(CI_MD) if isinstance(b, dict) and "distributed-device" in b)[
        "distributed-device"
    ]


def _clean_env(tmp_path: Path) -> dict[str, str]:
    """A child's environment (tests.helpers.run) without AWS variables either, and no AWS files of the machine."""
    env = child_env({name: None for name in os.environ if name.startswith("AWS_")})
    env.update(
        AWS_CONFIG_FILE=str(tmp_path / "aws-config-absent"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "aws-credentials-absent"),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_DEFAULT_REGION="us-east-1",
    )
    return env


def _extras(install: str) -> set[str]:
    match = re.search(r"pip install '?\.\[([\w,]+)\]'?", install)
    return set(match.group(1).split(",")) if match else set()


def _needed_extras(scripts: str) -> set[str]:
    needed = set()
    if "s3://" in scripts:
        needed.add("s3")
    if "TRACKER_DB" in scripts or "postgresql://" in scripts:
        needed.add("postgres")
    return needed


def _workspace(path: Path) -> Path:
    """A job's checkout: the lane scripts and the reference lane, as actions/checkout leaves them."""
    path.mkdir()
    for name in ("scripts", "samples"):
        (path / name).symlink_to(ROOT / name)
    return path


@pytest.fixture
def evidence_bucket(s3_endpoint: str, tmp_path: Path) -> str:
    """The bucket `evidence` the docs push to, on the suite's S3 server."""
    import boto3

    env = _clean_env(tmp_path)
    client = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=env["AWS_DEFAULT_REGION"]
    ).client("s3", endpoint_url=s3_endpoint)
    if "evidence" not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
        client.create_bucket(Bucket="evidence")
    return s3_endpoint


@pytest.fixture
def pg_tracker(pg_server: Any, tmp_path: Path) -> Iterator[str]:
    """A PostgreSQL tracker with experiment E1 (and a seal key pair in tmp_path, seal.key and seal.pub)."""
    name = f"ci{os.getpid()}{abs(hash(tmp_path)) % 100000}"
    url = str(pg_server.url(name))
    generate_keypair(tmp_path / "seal")
    for args in (["init"], ["experiment", "add", "E1"]):
        subprocess.run(["alpha", "tracker", "--db", url, *args], check=True, capture_output=True)
    yield url
    pg_server.drop_database(name)


class TestGitHubWorkflow:
    def test_every_action_is_pinned_by_commit(self) -> None:
        """Every `uses:` in docs/CI.md's workflow names a full commit SHA, with its release in a comment."""
        uses = [s["uses"] for job in _workflow()["jobs"].values() for s in job["steps"] if "uses" in s]
        assert uses
        assert [] == [u for u in uses if not _SHA_PIN.match(u)]
        for line in re.findall(r"uses: (actions/\S+.*)", CI_MD):
            assert re.match(r"actions/[\w-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$", line), line

    def test_the_lane_job_holds_only_the_seal_key(self) -> None:
        """The lane job's only secret is the seal's key (the tracker's database secret stays in the evidence job)."""
        lane = yaml.safe_dump(_workflow()["jobs"]["lane"])
        assert {"AOS_SEAL_KEY"} == set(re.findall(r"secrets\.(\w+)", lane))

    def test_each_job_installs_the_extras_it_uses(self) -> None:
        """Each job's `pip install` names the extras its steps need (s3 for s3://, postgres for the tracker)."""
        for name, job in _workflow()["jobs"].items():
            runs = [str(s["run"]) for s in job["steps"] if "run" in s]
            install = next(r for r in runs if "pip install" in r)
            assert _needed_extras("\n".join(runs)) <= _extras(install), name

    def test_actionlint_is_clean(self, tmp_path: Path) -> None:
        """actionlint (with shellcheck on the run: scripts) finds nothing in the workflow."""
        if shutil.which("actionlint") is None:
            pytest.fail("actionlint is not installed (the test extra brings it: pip install '.[test]')")
        _lint(tmp_path, {"docs.yml": _workflow_text()})

    def test_the_jobs_run_as_written(self, tmp_path: Path, evidence_bucket: str, pg_tracker: str) -> None:
        """The lane job gates and signs; the evidence job verifies, pushes, attests and attaches; audit is clean."""
        seal_key = (tmp_path / "seal.key").read_text()
        generate_keypair(tmp_path / "attest")
        # set up once, as the docs say: the tracker trusts seal.pub
        subprocess.run(["alpha", "tracker", "--db", pg_tracker, "key", "add", str(tmp_path / "seal.pub")], check=True)
        context: dict[str, Any] = {
            "secrets": {
                "AOS_SEAL_KEY": seal_key,
                "AOS_ATTEST_KEY": (tmp_path / "attest.key").read_text(),
                "TRACKER_DB": pg_tracker,
                "EVIDENCE_KEY_ID": "testing",
                "EVIDENCE_SECRET": "testing",
            },
            "vars": {"AOS_SEAL_PUB": (tmp_path / "seal.pub").read_text(), "EVIDENCE_ENDPOINT": evidence_bucket},
        }
        jobs = _workflow()["jobs"]
        env = _clean_env(tmp_path)
        lane_ws = _workspace(tmp_path / "lane")
        (tmp_path / "lane-temp").mkdir()
        lane = GitHubJob(lane_ws, tmp_path / "lane-temp", env, dict(context))
        for step in jobs["lane"]["steps"]:
            if "run" in step and "pip install" not in step["run"]:
                done = lane.run_step(step)
                assert 0 == done.returncode, done.stdout[-2000:] + done.stderr[-2000:]
        gate_outputs = _outputs(lane)
        assert ("pass", "static", "aos-streams/lane.aos") == (
            gate_outputs["verdict"], gate_outputs["scope"], gate_outputs["stream"]
        )  # fmt: skip
        needs = {"lane": {"outputs": {k: expand(v, lane.context) for k, v in jobs["lane"]["outputs"].items()}}}

        evidence_ws = _workspace(tmp_path / "evidence")
        shutil.copytree(lane_ws / "aos-streams", evidence_ws / "aos-streams")  # upload-artifact, download-artifact
        (tmp_path / "evidence-temp").mkdir()
        # what a runner sets, and the attest line names its attester by
        runner = {
            "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_WORKFLOW_REF": "OWNER/REPO/.github/workflows/ci.yml@refs/heads/main",
        }
        evidence = GitHubJob(evidence_ws, tmp_path / "evidence-temp", {**env, **runner}, {**context, "needs": needs})
        for step in jobs["evidence"]["steps"]:
            if "run" in step and "pip install" not in step["run"]:
                done = evidence.run_step(step)
                assert 0 == done.returncode, done.stdout[-2000:] + done.stderr[-2000:]
        assert (evidence_ws / "aos-streams" / "lane.aos.intoto.json").is_file()
        store_env = {**env, "AWS_ENDPOINT_URL": evidence_bucket, "AWS_ACCESS_KEY_ID": "testing"}
        store_env["AWS_SECRET_ACCESS_KEY"] = "testing"
        audit = subprocess.run(
            ["alpha", "tracker", "--db", pg_tracker, "audit"], capture_output=True, text=True, env=store_env
        )
        assert 0 == audit.returncode, audit.stdout + audit.stderr
        assert "s3://evidence/aos/" in audit.stdout


def _outputs(job: GitHubJob) -> dict[str, str]:
    """Every step output the job's steps wrote, the later winning."""
    merged: dict[str, str] = {}
    for i in range(1, job.count + 1):
        merged.update(read_outputs(job.runner_temp / f"output-{i}"))
    return merged


def _lint(tmp_path: Path, workflows: dict[str, str], action: bool = False) -> None:
    repo = tmp_path / "lint"
    (repo / ".github" / "workflows").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    if action:
        shutil.copy(ROOT / "action.yml", repo / "action.yml")
    for name, doc in workflows.items():
        (repo / ".github" / "workflows" / name).write_text(doc)
    done = subprocess.run(["actionlint"], cwd=repo, capture_output=True, text=True, check=False)
    assert (0, "") == (done.returncode, done.stdout), done.stdout + done.stderr


class TestGitLabJob:
    def test_it_installs_the_extras_it_uses(self) -> None:
        """The GitLab job's `pip install` names the extras its script needs."""
        script = "\n".join(map(str, _gitlab_job()["script"]))
        install = next(line for line in _gitlab_job()["script"] if "pip install" in str(line))
        assert _needed_extras(script) <= _extras(str(install))

    def test_the_job_runs_as_written(self, tmp_path: Path, evidence_bucket: str, pg_tracker: str) -> None:
        """The job gates, pushes, attests and attaches, and exits with the gate's exit code (0: a pass)."""
        generate_keypair(tmp_path / "attest")
        job = dict(_gitlab_job())
        job["script"] = [line for line in job["script"] if "pip install" not in str(line)]
        ws = _workspace(tmp_path / "job")
        env = _clean_env(tmp_path)
        env.update(
            TRACKER_DB=pg_tracker,
            AOS_ATTEST_KEY=str(tmp_path / "attest.key"),
            AWS_ENDPOINT_URL=evidence_bucket,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            # what a runner sets, and the attest line names its attester by
            CI_SERVER_URL="https://gitlab.example.com",
            CI_PROJECT_PATH="OWNER/REPO",
            CI_RUNNER_ID="7",
        )
        done = run_gitlab(job, ws, env)
        assert 0 == done.returncode, done.stdout[-2000:] + done.stderr[-2000:]
        assert (ws / "aos-streams" / "lane.aos.intoto.json").is_file()
        assert (ws / "aos-streams" / "junit.xml").is_file()


# -- action.yml and the GitLab template: installed from their own checkout ---------------------------


@pytest.fixture(scope="module")
def action_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkout of the package as the action's own folder (what `github.action_path` holds)."""
    src = tmp_path_factory.mktemp("action") / "alpha-observe"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "action.yml"):
        shutil.copy(ROOT / name, src / name)
    for name in ("aos", "gates", "observe", "tracker"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    return src


@pytest.fixture(scope="module")
def python_shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `python3` that makes virtual environments seeing this suite's packages, so pip installs the tool alone.

    Only `-m venv DIR` is changed (it adds --system-site-packages); the scripts' pip install runs as
    written (it builds the tool from the checkout; its dependencies are already there).
    """
    folder = tmp_path_factory.mktemp("shim")
    shim = folder / "python3"
    shim.write_text(
        f'#!/bin/sh\nif [ "$1" = -m ] && [ "$2" = venv ]; then\n'
        f'  shift 2; exec {sys.executable} -m venv --system-site-packages "$@"\nfi\n'
        f'exec {sys.executable} "$@"\n'
    )
    shim.chmod(0o755)
    return shim


def _action() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8")))


class TestAction:
    def test_it_is_a_composite_action_with_the_outputs(self) -> None:
        """action.yml is a composite action whose outputs are the gate's verdict, scope, stream and stream_id."""
        action = _action()
        assert "composite" == action["runs"]["using"]
        assert {"verdict", "scope", "stream", "stream_id"} <= set(action["outputs"])
        assert {"gate", "command", "out", "artifacts", "gate-files", "sign-key", "junit"} <= set(action["inputs"])
        assert [] == [s for s in action["runs"]["steps"] if "uses" in s]  # it uploads (and uses) nothing
        # the gate step is the last, and execs the recorder: nothing of the action runs after the command
        assert "gate" == action["runs"]["steps"][-1]["id"]
        assert str(action["runs"]["steps"][-1]["run"]).strip().splitlines()[-1].strip().startswith('exec "$ALPHA"')

    def test_actionlint_and_shellcheck_are_clean(self, tmp_path: Path) -> None:
        """A workflow using the action lints clean (actionlint checks its inputs); each step passes shellcheck."""
        if shutil.which("actionlint") is None or shutil.which("shellcheck") is None:
            pytest.fail("actionlint and shellcheck come with the test extra (pip install '.[test]')")
        user = (
            "on: push\npermissions:\n  contents: read\njobs:\n  lane:\n    runs-on: ubuntu-latest\n    steps:\n"
            "      - id: gate\n        uses: ./\n        with:\n          gate: exit-zero\n"
            "          command: make test\n"
            '      - run: echo "$V"\n        env:\n          V: ${{ steps.gate.outputs.verdict }}\n'
        )
        _lint(tmp_path, {"use.yml": user}, action=True)
        for step in _action()["runs"]["steps"]:
            script = tmp_path / "step.sh"
            script.write_text("#!/bin/bash\n" + _expressions_marked(step["run"]))
            done = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True, check=False)
            assert 0 == done.returncode, done.stdout

    @pytest.mark.parametrize(
        ("command", "verdict", "code"), [("echo hello; env > seen.txt", "pass", 0), ("exit 3", "fail", 1)]
    )
    def test_the_steps_run_as_the_runner_would(
        self, command: str, verdict: str, code: int, tmp_path: Path, action_source: Path, python_shim: Path
    ) -> None:
        """Installed from its own folder, the action gates COMMAND, signs without the command seeing the key,
        sets the outputs, writes JUnit, and fails the step with the gate's exit code."""
        generate_keypair(tmp_path / "seal")
        inputs = {
            "gate": "exit-zero",
            "command": command,
            "out": "aos-streams/lane.aos",
            "artifacts": "seen.txt\n",
            "gate-files": "",
            "sign-key": (tmp_path / "seal.key").read_text(),
            "junit": "aos-streams/junit.xml",
            "extras": "",
            "python": str(python_shim),
        }
        ws = tmp_path / "ws"
        ws.mkdir()
        (tmp_path / "temp").mkdir()
        job = GitHubJob(
            ws,
            tmp_path / "temp",
            _clean_env(tmp_path),
            {"inputs": inputs, "github": {"action_path": str(action_source)}},
        )
        job.env.pop("PYTHONPATH", None)  # the action's own installed copy, not the suite's
        install, gate = _action()["runs"]["steps"]
        done = job.run_step(install)
        assert 0 == done.returncode, done.stderr[-2000:]
        done = job.run_step(gate)
        assert code == done.returncode, done.stderr[-2000:]
        outputs = {k: expand(v["value"], job.context) for k, v in _action()["outputs"].items()}
        assert (verdict, "command", "aos-streams/lane.aos") == (outputs["verdict"], outputs["scope"], outputs["stream"])
        assert (ws / "aos-streams" / "junit.xml").is_file()
        verify = subprocess.run(
            ["alpha", "observe", "verify", str(ws / "aos-streams" / "lane.aos"), "--key", str(tmp_path / "seal.pub")],
            capture_output=True,
        )
        assert 0 == verify.returncode
        if (ws / "seen.txt").exists():
            assert "AOS_SIGN_KEY" not in (ws / "seen.txt").read_text()
            assert "PRIVATE KEY" not in (ws / "seen.txt").read_text()


def _expressions_marked(script: str) -> str:
    """The script with each ``${{ ... }}`` replaced by a word shellcheck can read (values come through env)."""
    return re.sub(r"\$\{\{.*?\}\}", "EXPRESSION", script)


def _template() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "ci" / "alpha-observe.gitlab-ci.yml").read_text(encoding="utf-8")))


def _needle(pem: str) -> str:
    """The key's own bytes the probe looks for (the end of the PEM body: its start is the same for every key)."""
    return "".join(pem.splitlines()[1:-1])[-32:].encode().hex()


def _probe_command(pem: str, runner: str) -> str:
    """tests/helpers/key_probe.py as a gated command: ``runner`` is ``--runner-pid N`` or ``--runner-match S``."""
    probe = ROOT / "tests" / "helpers" / "key_probe.py"
    return f"{sys.executable} {probe} --needle-hex {_needle(pem)} {runner} --report probe.json --marker planted.txt"


def _probe_report(ws: Path) -> dict[str, Any]:
    import json

    return dict(json.loads((ws / "probe.json").read_text()))


def _assert_removed(job_tmp: Path, within: float = 20.0, glob: str = "*") -> None:
    """Nothing (matching ``glob``) is left in a job's TMPDIR once its recorder has exited (a watcher removes
    the venv after it, polling once a second)."""
    deadline = time.monotonic() + within
    while list(job_tmp.glob(glob)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [] == [p.name for p in job_tmp.glob(glob)]


class TestGitLabTemplate:
    def test_it_parses_as_two_hidden_jobs_to_extend(self) -> None:
        """The template is the gate job and the report job, hidden, with artifacts kept always."""
        doc = _template()
        assert [".alpha-observe-gate", ".alpha-observe-report"] == list(doc)
        assert "always" == doc[".alpha-observe-gate"]["artifacts"]["when"]

    def test_the_gate_line_is_the_last_and_execs(self) -> None:
        """The gate job's script ends with `exec` of the recorder: nothing of the job runs after the command."""
        script = _template()[".alpha-observe-gate"]["script"]
        lines = [line.strip() for line in str(script[-1]).strip().splitlines()]
        assert lines[-1].startswith('exec "$venv/bin/alpha" "$@" -- bash -c "$AOS_COMMAND"')
        assert "CI_PROJECT_DIR" not in "\n".join(map(str, script))  # the venv lives outside the project folder

    def test_its_variables_match_the_actions_inputs(self) -> None:
        """Each of action.yml's inputs is a variable AOS_NAME of the template's jobs (AOS_SIGN_KEY for sign-key)."""
        doc = _template()
        text = (ROOT / "ci" / "alpha-observe.gitlab-ci.yml").read_text(encoding="utf-8")
        named = set(re.findall(r"\bAOS_[A-Z_]+", text))
        variables = set(doc[".alpha-observe-gate"]["variables"]) | set(doc[".alpha-observe-report"]["variables"])
        for name in _action()["inputs"]:
            variable = "AOS_" + name.upper().replace("-", "_")
            assert variable in named, name
            assert variable in variables or variable == "AOS_SIGN_KEY", name  # the key is a CI/CD variable

    def test_its_scripts_pass_shellcheck(self, tmp_path: Path) -> None:
        """Both jobs' scripts, as the runner runs them, pass shellcheck."""
        if shutil.which("shellcheck") is None:
            pytest.fail("shellcheck comes with the test extra (pip install '.[test]')")
        from tests.helpers.ci_runner import gitlab_script

        for name, job in _template().items():
            script = tmp_path / "job.sh"
            script.write_text("#!/bin/bash\n" + gitlab_script(job))
            done = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True, check=False)
            assert 0 == done.returncode, name + done.stdout

    def test_without_a_source_it_says_what_to_set(self, tmp_path: Path) -> None:
        """Neither AOS_SOURCE nor AOS_REPOSITORY and AOS_REF: exit 2, naming them, before anything is installed."""
        env = _clean_env(tmp_path)
        for name in ("AOS_SOURCE", "AOS_REPOSITORY", "AOS_REF"):
            env.pop(name, None)
        done = run_gitlab(_template()[".alpha-observe-gate"], tmp_path, env)
        assert 2 == done.returncode
        assert "set AOS_REPOSITORY and AOS_REF" in done.stderr

    @pytest.mark.parametrize(("command", "code"), [("echo hello", 0), ("exit 4", 1)])
    @pytest.mark.parametrize("key_type", ["file", "variable"])
    def test_its_jobs_run(
        self, command: str, code: int, key_type: str, tmp_path: Path, action_source: Path, python_shim: Path
    ) -> None:
        """Extended with a gate and a command, the gate job installs from AOS_SOURCE, gates, signs and exits as
        the gate; the report job verifies the stream with the public key and writes the report."""
        doc = _template()
        generate_keypair(tmp_path / "seal")
        ws = tmp_path / "project"
        ws.mkdir()
        key_file = tmp_path / "runner-tmp" / "AOS_SIGN_KEY"  # where a runner writes a File-type variable
        key_file.parent.mkdir()
        key_file.write_text((tmp_path / "seal.key").read_text())
        env = _clean_env(tmp_path)
        env.pop("PYTHONPATH", None)
        job_tmp = tmp_path / "job-tmp"  # the runner's TMPDIR, where each job makes its venv
        job_tmp.mkdir()
        env.update(
            TMPDIR=str(job_tmp),
            AOS_SOURCE=str(action_source),
            AOS_PYTHON=str(python_shim),
            AOS_GATE="exit-zero",
            AOS_COMMAND=command,
            AOS_SIGN_KEY=str(key_file) if key_type == "file" else key_file.read_text(),
        )
        done = run_gitlab(doc[".alpha-observe-gate"], ws, env)
        assert code == done.returncode, done.stdout[-2000:] + done.stderr[-2000:]
        _assert_removed(job_tmp)  # the recorder's venv goes once it has exited
        assert not key_file.exists() or key_type == "variable"  # a File-type variable's file is removed
        stream = ws / "aos-streams" / "exit-zero.aos"
        verify = subprocess.run(
            ["alpha", "observe", "verify", str(stream), "--key", str(tmp_path / "seal.pub")], capture_output=True
        )
        assert 0 == verify.returncode
        assert (ws / "aos-streams" / "junit.xml").is_file()
        env.update(AOS_SEAL_PUB=(tmp_path / "seal.pub").read_text())
        done = run_gitlab(doc[".alpha-observe-report"], ws, env)
        assert 0 == done.returncode, done.stdout[-2000:] + done.stderr[-2000:]
        assert (ws / "aos-streams" / "exit-zero.report.html").is_file()
        assert [] == list(job_tmp.iterdir())  # the report job's venv and public key, gone with the job

    @pytest.mark.parametrize("job", [".alpha-observe-gate", ".alpha-observe-report"])
    def test_a_failed_install_leaves_nothing_behind(self, job: str, tmp_path: Path, python_shim: Path) -> None:
        """A job that stops before its command (here: a source pip cannot install) removes its venv too."""
        job_tmp = tmp_path / "job-tmp"
        job_tmp.mkdir()
        env = _clean_env(tmp_path)
        env.pop("PYTHONPATH", None)
        env.update(TMPDIR=str(job_tmp), AOS_SOURCE=str(tmp_path / "no-such-source"), AOS_PYTHON=str(python_shim))
        done = run_gitlab(_template()[job], tmp_path, env)
        assert 0 != done.returncode
        assert [] == list(job_tmp.iterdir())

    def test_the_report_job_refuses_a_stream_another_key_signed(
        self, tmp_path: Path, action_source: Path, python_shim: Path
    ) -> None:
        """A stream signed by a key other than AOS_SEAL_PUB's fails the report job before any report is written."""
        generate_keypair(tmp_path / "seal")
        generate_keypair(tmp_path / "other")
        ws = tmp_path / "project"
        (ws / "aos-streams").mkdir(parents=True)
        subprocess.run(
            ["alpha", "observe", "gate", "exit-zero", "--quiet", "--sign-key", str(tmp_path / "other.key"),
             "--out", str(ws / "aos-streams" / "lane.aos"), "--", "true"],
            check=True, capture_output=True,
        )  # fmt: skip
        env = _clean_env(tmp_path)
        env.pop("PYTHONPATH", None)
        env.update(AOS_SOURCE=str(action_source), AOS_PYTHON=str(python_shim), AOS_SEAL_PUB=str(tmp_path / "seal.pub"))
        done = run_gitlab(_template()[".alpha-observe-report"], ws, env)
        assert 0 != done.returncode
        assert not (ws / "aos-streams" / "lane.report.html").exists()


class TestTheKeyProbe:
    """While the gated command runs, no process of the job but the recorder holds the key, and nothing the
    command can write runs after it (tests/helpers/key_probe.py is the command)."""

    @pytest.mark.parametrize("key_type", ["file", "variable"])
    def test_the_gitlab_template(self, key_type: str, tmp_path: Path, action_source: Path, python_shim: Path) -> None:
        generate_keypair(tmp_path / "seal")
        pem = (tmp_path / "seal.key").read_text()
        ws = tmp_path / "project"
        ws.mkdir()
        key_file = tmp_path / "AOS_SIGN_KEY"
        key_file.write_text(pem)
        env = _clean_env(tmp_path)
        env.pop("PYTHONPATH", None)
        env.update(
            AOS_SOURCE=str(action_source),
            AOS_PYTHON=str(python_shim),
            AOS_GATE="exit-zero",
            AOS_COMMAND=_probe_command(pem, f"--runner-pid {os.getpid()}"),
            AOS_SIGN_KEY=str(key_file) if key_type == "file" else pem,
        )
        done = run_gitlab(_template()[".alpha-observe-gate"], ws, env)
        assert 0 == done.returncode, done.stdout[-2000:] + done.stderr[-2000:]
        report = _probe_report(ws)
        assert [] == report["holders"]
        assert report["recorder"]
        assert report["replaced"]  # it found the recorder's alpha and replaced it, planted in its modules ...
        assert report["modules"] > 0
        assert not (ws / "planted.txt").exists()  # ... and nothing ran them
        verify = subprocess.run(
            ["alpha", "observe", "verify", str(ws / "aos-streams" / "exit-zero.aos"), "--key",
             str(tmp_path / "seal.pub")], capture_output=True,
        )  # fmt: skip
        assert 0 == verify.returncode

    def test_the_actions_steps(self, tmp_path: Path, action_source: Path, python_shim: Path) -> None:
        generate_keypair(tmp_path / "seal")
        pem = (tmp_path / "seal.key").read_text()
        inputs = {
            "gate": "exit-zero",
            "command": _probe_command(pem, f"--runner-pid {os.getpid()}"),
            "out": "aos-streams/lane.aos",
            "sign-key": pem,
            "python": str(python_shim),
        }
        ws = tmp_path / "ws"
        ws.mkdir()
        (tmp_path / "temp").mkdir()
        job = GitHubJob(
            ws,
            tmp_path / "temp",
            _clean_env(tmp_path),
            {"inputs": inputs, "github": {"action_path": str(action_source)}},
        )
        job.env.pop("PYTHONPATH", None)
        for step in _action()["runs"]["steps"]:  # every step: none may run what the command wrote
            done = job.run_step(step)
            assert 0 == done.returncode, done.stderr[-2000:]
        report = _probe_report(ws)
        assert [] == report["holders"]
        assert report["recorder"]
        assert report["modules"] > 0
        assert not (ws / "planted.txt").exists()

    def test_it_finds_a_job_shell_that_holds_the_key(self, tmp_path: Path, action_source: Path) -> None:
        """The forgery test of the probe itself: a job whose shell stays the recorder's parent with the key in
        its environment, and runs the venv's alpha after the command (as the template once did), is caught."""
        generate_keypair(tmp_path / "seal")
        pem = (tmp_path / "seal.key").read_text()
        ws = tmp_path / "project"
        ws.mkdir()
        venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
        (venv / "bin" / "alpha").write_text(f"#!{sys.executable}\nfrom observe.cli.entry import main\nmain()\n")
        (venv / "bin" / "alpha").chmod(0o755)
        leaky = {
            "script": [
                "mkdir -p aos-streams",
                f'"{venv}/bin/alpha" observe gate exit-zero --sign-key-env SEAL_KEY --out aos-streams/l.aos'
                ' -- bash -c "$AOS_COMMAND" || rc=$?',
                f'"{venv}/bin/alpha" observe report aos-streams/l.aos -o aos-streams/l.html || true',
            ]
        }
        env = _clean_env(tmp_path)
        env.update(SEAL_KEY=pem, AOS_COMMAND=_probe_command(pem, f"--runner-pid {os.getpid()}"))
        done = run_gitlab(leaky, ws, env)
        assert 0 == done.returncode, done.stdout[-2000:] + done.stderr[-2000:]
        report = _probe_report(ws)
        assert {"environ", "memory"} <= {h["where"] for h in report["holders"]}
        assert (ws / "planted.txt").exists()


# -- the template in a real runner of .gitlab-ci.yml files: gitlab-ci-local's shell executor ----------------


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.email=ci@example.invalid", "-c", "user.name=ci", *args],
        cwd=cwd, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


@pytest.fixture
def raw_files(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An HTTP server on 127.0.0.1 serving GitLab's raw file URLs (``/OWNER/NAME/-/raw/REF/PATH``) of the
    git repositories under a folder: ``(base URL, folder)``."""
    import http.server
    import threading

    root = tmp_path / "forge"
    root.mkdir()

    class Raw(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            match = re.match(r"^/([\w.-]+/[\w.-]+)/-/raw/([0-9a-f]{40})/(.+)$", self.path)
            done = None
            if match:
                where = f"{match.group(2)}:{match.group(3)}"
                done = subprocess.run(
                    ["git", "-C", str(root / match.group(1)), "show", where], capture_output=True, check=False
                )
            if done is None or done.returncode != 0:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(done.stdout)))
            self.end_headers()
            self.wfile.write(done.stdout)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Raw)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root
    server.shutdown()
    thread.join()


def _needs_gitlab_ci_local() -> None:
    from tests.helpers.ci_runner import gitlab_ci_local

    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed: gitlab-ci-local (tests/js) cannot run")
    if gitlab_ci_local() is None:
        pytest.fail("tests/js has no gitlab-ci-local: npm ci --prefix tests/js (.ci/run does)")
    if shutil.which("rsync") is None:
        pytest.fail("gitlab-ci-local copies the project with rsync: apt-get install rsync (.ci/run does)")


class TestGitLabCiLocal:
    """The template included from another project, run by gitlab-ci-local's shell executor: a signed
    `tests-pass` gate over pytest's JUnit, then the report job on its artifacts."""

    def _projects(self, tmp_path: Path, base: str, forge: Path) -> tuple[Path, str]:
        """This tool as the project OWNER/alpha-observe on the forge, at one commit; and a project of a user's."""
        tool = forge / "OWNER" / "alpha-observe"
        tool.mkdir(parents=True)
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            shutil.copy(ROOT / name, tool / name)
        for name in ("aos", "gates", "observe", "tracker", "ci"):
            shutil.copytree(ROOT / name, tool / name, ignore=shutil.ignore_patterns("__pycache__"))
        _git(tool, "init", "-q", "-b", "main")
        _git(tool, "add", ".")
        _git(tool, "commit", "-qm", "alpha-observe")
        sha = _git(tool, "rev-parse", "HEAD")

        project = tmp_path / "app"
        (project / "tests").mkdir(parents=True)
        (project / "tests" / "test_app.py").write_text("def test_adds():\n    assert 1 + 1 == 2\n")
        (project / ".gitignore").write_text(".gitlab-ci-local/\n.gcl-home/\n.gitlab-ci-local-variables.yml\n")
        return project, sha

    def _pipeline(self, base: str, sha: str, tool: Path, command: str) -> str:
        return f"""\
include:
  - remote: {base}/OWNER/alpha-observe/-/raw/{sha}/ci/alpha-observe.gitlab-ci.yml

variables:
  AOS_REPOSITORY: file://localhost{tool}
  AOS_REF: {sha}

unit-tests:
  extends: .alpha-observe-gate
  variables:
    AOS_GATE: tests-pass
    AOS_COMMAND: {json.dumps(command)}
    AOS_ARTIFACTS: reports/junit.xml

unit-tests-report:
  extends: .alpha-observe-report
  needs: [unit-tests]
"""

    def _run(
        self, tmp_path: Path, raw_files: tuple[str, Path], python_shim: Path, command: str, key_type: str = "file"
    ) -> tuple[subprocess.CompletedProcess[str], Path]:
        """Run the pipeline; the seal key is ``tmp_path/seal.key`` (made when absent)."""
        from tests.helpers.ci_runner import run_gitlab_ci_local

        base, forge = raw_files
        project, sha = self._projects(tmp_path, base, forge)
        tool = forge / "OWNER" / "alpha-observe"
        (project / ".gitlab-ci.yml").write_text(self._pipeline(base, sha, tool, command))
        if not (tmp_path / "seal.key").exists():
            generate_keypair(tmp_path / "seal")
        key = (tmp_path / "seal.key").read_text()
        variables = {
            # CI/CD variables of the project's settings: the seal key as a File-type variable
            "AOS_SIGN_KEY": {"type": "file", "values": {"*": key}} if key_type == "file" else key,
            "AOS_SEAL_PUB": (tmp_path / "seal.pub").read_text(),
            "AOS_PYTHON": str(python_shim),  # a venv that sees this suite's packages (no download)
        }
        (project / ".gitlab-ci-local-variables.yml").write_text(yaml.safe_dump(variables))
        _git(project, "init", "-q", "-b", "main")
        _git(project, "add", ".")
        _git(project, "commit", "-qm", "app")
        env = _clean_env(tmp_path)
        env.pop("PYTHONPATH", None)
        env["HOME"] = str(tmp_path / "home")
        return run_gitlab_ci_local(project, env=env), project

    def test_the_docs_pipeline_as_written(self, tmp_path: Path, raw_files: tuple[str, Path], python_shim: Path) -> None:
        """docs/CI.md's `.gitlab-ci.yml` (placeholders filled) and its commands to try it: a signed
        `tests-pass` gate over pytest's JUnit, and the report job, which verifies it with seal.pub."""
        from tests.helpers.ci_runner import gitlab_ci_local

        _needs_gitlab_ci_local()
        base, forge = raw_files
        project, sha = self._projects(tmp_path, base, forge)
        tool = forge / "OWNER" / "alpha-observe"
        pipeline = next(b for b in re.findall(r"```yaml\n(.*?)```", CI_MD, flags=re.S) if ".alpha-observe-gate" in b)
        pipeline = (
            pipeline.replace("https://HOST/OWNER/alpha-observe/-/raw/", f"{base}/OWNER/alpha-observe/-/raw/")
            .replace("https://HOST/OWNER/alpha-observe.git", f"file://localhost{tool}")
            .replace("<commit SHA>", sha)
        )
        (project / ".gitlab-ci.yml").write_text(pipeline)
        (project / ".gitignore").write_text(".gitlab-ci-local*\n")
        _git(project, "init", "-q", "-b", "main")
        _git(project, "add", ".")
        _git(project, "commit", "-qm", "app")
        commands = next(b for b in re.findall(r"```sh\n(.*?)```", CI_MD, flags=re.S) if "gitlab-ci-local " in b)
        env = _clean_env(tmp_path)
        env.pop("PYTHONPATH", None)
        tool_bin = gitlab_ci_local()
        assert tool_bin is not None
        # python3: the shim (a venv seeing this suite's packages: pytest, and the tool's dependencies)
        job_tmp = tmp_path / "job-tmp"  # the runner machine's TMPDIR
        job_tmp.mkdir()
        env.update(
            HOME=str(tmp_path / "home"),
            PATH=f"{python_shim.parent}:{tool_bin.parent}:{env['PATH']}",
            TMPDIR=str(job_tmp),
        )
        done = subprocess.run(
            ["bash", "-eo", "pipefail", "-c", commands], cwd=project, env=env, capture_output=True, text=True,
            timeout=600, check=False,
        )  # fmt: skip
        log = done.stdout[-4000:] + done.stderr[-3000:]
        assert 0 == done.returncode, log
        _assert_removed(job_tmp, glob="alpha-observe.*")  # no job left its venv on the runner
        assert re.search(r"PASS\s+unit-tests\b", done.stdout), log
        assert re.search(r"PASS\s+unit-tests-report\b", done.stdout), log
        streams = project / ".gitlab-ci-local" / "artifacts"
        stream = next(streams.glob("unit-tests/aos-streams/tests-pass.aos"))
        assert not (project / "seal.key").exists()
        verify = subprocess.run(
            ["alpha", "observe", "verify", str(stream), "--key", str(project / "seal.pub")],
            capture_output=True, text=True,
        )  # fmt: skip
        assert 0 == verify.returncode, verify.stdout + verify.stderr
        verdict = subprocess.run(["alpha", "observe", "verdict", str(stream)], capture_output=True, text=True)
        assert 0 == verdict.returncode, verdict.stdout
        assert next(streams.glob("unit-tests-report/aos-streams/tests-pass.report.html")).is_file()
        junit = next(streams.glob("unit-tests/aos-streams/junit.xml")).read_text()
        assert "test_adds" in junit  # pytest's own testcase, carried

    @pytest.mark.parametrize(("key_type", "leaks"), [("file", False), ("variable", True)])
    def test_the_key_probe(
        self, key_type: str, leaks: bool, tmp_path: Path, raw_files: tuple[str, Path], python_shim: Path
    ) -> None:
        """A File-type key is held by no process of the job but the recorder. gitlab-ci-local gives a plain
        variable to the environment of the shell that starts the job's script, which stays: it leaks there."""
        _needs_gitlab_ci_local()
        generate_keypair(tmp_path / "seal")
        command = _probe_command((tmp_path / "seal.key").read_text(), "--runner-match gitlab-ci-local")
        done, project = self._run(tmp_path, raw_files, python_shim, command, key_type)
        log = done.stdout[-4000:] + done.stderr[-3000:]
        report = _probe_report(project)
        if leaks:
            assert ["environ"] == sorted({h["where"] for h in report["holders"] if h["where"] == "environ"}), log
        else:
            assert [] == report["holders"], log
        assert report["recorder"], log
        assert report["replaced"], log  # the recorder's alpha was found and replaced, its modules planted ...
        assert report["modules"] > 0, log
        assert not (project / "planted.txt").exists()  # ... and nothing of the job ran it
