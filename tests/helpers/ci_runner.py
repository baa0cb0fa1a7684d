"""Run CI definitions' shell as their runners would: GitHub Actions steps and GitLab scripts, locally.

Not a CI runner: enough of one to run the ``run:`` scripts of a workflow or a
composite action, and a GitLab job's ``script:``, with the environment, the
``${{ ... }}`` values and the runner's files (``$GITHUB_OUTPUT``, ...) that the
real runner would give them. ``uses:`` steps are left to the caller.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def yaml_blocks(markdown: str, language: str = "yaml") -> list[Any]:
    """Every fenced block of ``language`` in ``markdown``, parsed."""
    return [yaml.safe_load(b) for b in re.findall(rf"```{language}\n(.*?)```", markdown, flags=re.S)]


def expand(text: str, context: dict[str, Any]) -> str:
    """``text`` with each ``${{ a.b.c }}`` replaced by that path in ``context`` (missing: empty, as GitHub does)."""

    def value(match: re.Match[str]) -> str:
        node: Any = context
        for part in match.group(1).split("."):
            node = node.get(part, "") if isinstance(node, dict) else ""
        return str(node)

    return _EXPR.sub(value, text)


def read_outputs(path: Path) -> dict[str, str]:
    """The ``NAME=value`` and ``NAME<<DELIMITER`` lines a step wrote to its ``$GITHUB_OUTPUT``."""
    out: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, i + 1)
            out[name] = "\n".join(lines[i + 1 : end])
            i = end + 1
            continue
        name, _, val = line.partition("=")
        out[name] = val
        i += 1
    return out


@dataclass
class StepResult:
    """What one step did: its exit code, output and ``$GITHUB_OUTPUT`` values."""

    returncode: int
    stdout: str
    stderr: str
    outputs: dict[str, str] = field(default_factory=dict)


class GitHubJob:
    """The runner's side of one job: a workspace, the runner's files and the steps' outputs so far."""

    def __init__(self, workspace: Path, runner_temp: Path, env: dict[str, str], context: dict[str, Any]) -> None:
        self.workspace = workspace
        self.runner_temp = runner_temp
        self.env = env
        self.context = context
        self.context.setdefault("steps", {})
        self.summary = runner_temp / "step-summary.md"
        self.count = 0

    def run_step(self, step: dict[str, Any], *, cwd: Path | None = None) -> StepResult:
        """Run one ``run:`` step with ``bash --noprofile --norc -eo pipefail``, as GitHub's ``shell: bash``."""
        self.count += 1
        output = self.runner_temp / f"output-{self.count}"
        output.touch()
        env = dict(self.env)
        env.update(
            GITHUB_ACTIONS="true",
            GITHUB_OUTPUT=str(output),
            GITHUB_ENV=str(self.runner_temp / "env"),
            GITHUB_PATH=str(self.runner_temp / "path"),
            GITHUB_STEP_SUMMARY=str(self.summary),
            GITHUB_WORKSPACE=str(self.workspace),
            RUNNER_TEMP=str(self.runner_temp),
        )
        for name, raw in (step.get("env") or {}).items():
            env[name] = expand(str(raw), self.context)
        script = self.runner_temp / f"step-{self.count}.sh"
        script.write_text(expand(str(step["run"]), self.context), encoding="utf-8")
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=cwd or self.workspace,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        result = StepResult(done.returncode, done.stdout, done.stderr, read_outputs(output))
        if "id" in step:
            self.context["steps"][step["id"]] = {"outputs": result.outputs}
        return result


def gitlab_script(job: dict[str, Any]) -> str:
    """A GitLab job's ``script:`` as the one shell script its runner runs (each line stops the job on failure)."""
    lines = [line if isinstance(line, str) else "\n".join(line) for line in job["script"]]
    return "set -eo pipefail\n" + "\n".join(lines) + "\n"


def run_gitlab(job: dict[str, Any], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a GitLab job's script in ``cwd`` with its ``variables:`` under ``env`` (the CI/CD variables win).

    An ``env`` with ``PATH`` is the whole environment (a variable it lacks is not set, as ``PYTHONPATH``
    taken out of it); without, it is added to this process's."""
    full = {str(k): str(v) for k, v in (job.get("variables") or {}).items()}
    full.update(env)
    full.setdefault("CI_PROJECT_DIR", str(cwd))
    full.setdefault("GITLAB_CI", "true")
    merged = full if "PATH" in env else {**os.environ, **full}
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", gitlab_script(job)],
        cwd=cwd,
        env=merged,
        capture_output=True,
        text=True,
        check=False,
    )


def gitlab_ci_local() -> Path | None:
    """tests/js's gitlab-ci-local (``npm ci --prefix tests/js``), or None when it is not installed."""
    from tests.helpers.paths import ROOT

    path = ROOT / "tests" / "js" / "node_modules" / ".bin" / "gitlab-ci-local"
    return path if path.exists() else None


def run_gitlab_ci_local(project: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run gitlab-ci-local in ``project`` (a git repository) with its shell executor, every job on this machine."""
    tool = gitlab_ci_local()
    assert tool is not None
    return subprocess.run(
        [str(tool), "--force-shell-executor", "--no-color", "--home", str(project / ".gcl-home"), *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
