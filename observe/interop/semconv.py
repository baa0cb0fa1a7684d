"""OpenTelemetry's CI/CD and VCS attributes for a run, from the CI variables ``stream.open`` recorded.

Only the environment the recorder itself started with counts (``stream.open``'s
``env``, written before the command ran), so the recorded command cannot change
what its run is attributed to. A value the recorder did not record
(``[NOT RECORDED]``) or an empty one gives no attribute. The names are those of
the semantic conventions' ``cicd.*`` and ``vcs.*`` registries; GitHub Actions,
GitLab CI and Buildkite are read (docs/CI.md, "OTLP traces", lists the mapping).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["ci_attributes", "source_attributes"]

_Get = Callable[[str], "str | None"]


def _without_credentials(url: str | None) -> str | None:
    """``url`` without a user or password in its authority (a clone URL may carry a token)."""
    if not url:
        return None
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def _github(get: _Get) -> dict[str, str | None]:
    server, repo, run = get("GITHUB_SERVER_URL"), get("GITHUB_REPOSITORY"), get("GITHUB_RUN_ID")
    repo_url = f"{server.rstrip('/')}/{repo}" if server and repo else None
    run_url = f"{repo_url}/actions/runs/{run}" if repo_url and run else None
    if run_url and (attempt := get("GITHUB_RUN_ATTEMPT")):
        run_url += f"/attempts/{attempt}"
    ref = get("GITHUB_REF") or ""
    change = re.fullmatch(r"refs/pull/(\d+)/(?:merge|head)", ref)
    ref_type = get("GITHUB_REF_TYPE")
    return {
        "cicd.pipeline.name": get("GITHUB_WORKFLOW"),
        "cicd.pipeline.run.id": run,
        "cicd.pipeline.run.url.full": run_url,
        "cicd.pipeline.task.name": get("GITHUB_JOB"),
        "vcs.provider.name": "github",
        "vcs.repository.url.full": repo_url,
        "vcs.repository.name": repo.rsplit("/", 1)[-1] if repo else None,
        "vcs.owner.name": get("GITHUB_REPOSITORY_OWNER"),
        "vcs.ref.head.revision": get("GITHUB_SHA"),
        "vcs.ref.head.name": get("GITHUB_HEAD_REF") or get("GITHUB_REF_NAME"),
        "vcs.ref.head.type": ref_type if ref_type in ("branch", "tag") else None,
        "vcs.ref.base.name": get("GITHUB_BASE_REF"),
        "vcs.change.id": change.group(1) if change else None,
    }


def _gitlab(get: _Get) -> dict[str, str | None]:
    path = get("CI_PROJECT_PATH")
    return {
        "cicd.pipeline.name": path,
        "cicd.pipeline.run.id": get("CI_PIPELINE_ID"),
        "cicd.pipeline.run.url.full": get("CI_PIPELINE_URL"),
        "cicd.pipeline.task.name": get("CI_JOB_NAME"),
        "cicd.pipeline.task.run.id": get("CI_JOB_ID"),
        "cicd.pipeline.task.run.url.full": get("CI_JOB_URL"),
        "vcs.provider.name": "gitlab",
        "vcs.repository.url.full": _without_credentials(get("CI_PROJECT_URL")),
        "vcs.repository.name": path.rsplit("/", 1)[-1] if path else None,
        "vcs.ref.head.revision": get("CI_COMMIT_SHA"),
        "vcs.ref.head.name": get("CI_COMMIT_REF_NAME"),
        "vcs.ref.head.type": "tag" if get("CI_COMMIT_TAG") else ("branch" if get("CI_COMMIT_BRANCH") else None),
        "vcs.change.id": get("CI_MERGE_REQUEST_IID"),
    }


def _buildkite(get: _Get) -> dict[str, str | None]:
    build_url, job = get("BUILDKITE_BUILD_URL"), get("BUILDKITE_JOB_ID")
    pr = get("BUILDKITE_PULL_REQUEST")
    return {
        "cicd.pipeline.name": get("BUILDKITE_PIPELINE_NAME") or get("BUILDKITE_PIPELINE_SLUG"),
        "cicd.pipeline.run.id": get("BUILDKITE_BUILD_ID"),
        "cicd.pipeline.run.url.full": build_url,
        "cicd.pipeline.task.name": get("BUILDKITE_LABEL") or get("BUILDKITE_STEP_KEY"),
        "cicd.pipeline.task.run.id": job,
        "cicd.pipeline.task.run.url.full": f"{build_url}#{job}" if build_url and job else None,
        "vcs.repository.url.full": _without_credentials(get("BUILDKITE_REPO")),
        "vcs.ref.head.revision": get("BUILDKITE_COMMIT"),
        "vcs.ref.head.name": get("BUILDKITE_BRANCH"),
        "vcs.ref.head.type": "tag" if get("BUILDKITE_TAG") else ("branch" if get("BUILDKITE_BRANCH") else None),
        "vcs.ref.base.name": get("BUILDKITE_PULL_REQUEST_BASE_BRANCH"),
        "vcs.change.id": pr if pr and pr.isdigit() else None,
    }


def ci_attributes(env: Mapping[str, Any]) -> dict[str, str]:
    """The ``cicd.*`` and ``vcs.*`` attributes the recorded ``env`` gives (empty outside a known CI)."""
    from observe.ci.systems import BUILDKITE, GITHUB, GITLAB, detect
    from observe.secrets.envpolicy import NOT_RECORDED

    recorded = {k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str)}

    def get(name: str) -> str | None:
        value = recorded.get(name)
        return value if value and value != NOT_RECORDED else None

    readers = {GITHUB: _github, GITLAB: _gitlab, BUILDKITE: _buildkite}
    system = detect({k: v for k, v in recorded.items() if v != NOT_RECORDED})
    if system is None:
        return {}
    return {k: v for k, v in readers[system](get).items() if v is not None and v != NOT_RECORDED}


def source_attributes(source: Any) -> dict[str, str | bool]:
    """The ``vcs.*`` attributes of the recorder's own ``source`` record (``stream.open``), and
    ``aos.source.*`` for the tree state; empty when it recorded no repository or could not read one.

    The recorder read these from git itself before the command started, so they take precedence
    over the same names derived from the recorded CI variables (:func:`ci_attributes`).
    """
    from observe.interop.verified import display

    if not isinstance(source, dict) or "error" in source:
        return {}
    found: dict[str, str | bool] = {}
    if source.get("commit") is not None:
        found["vcs.ref.head.revision"] = display(source["commit"])
    if source.get("branch") is not None:
        found["vcs.ref.head.name"] = display(source["branch"])
        found["vcs.ref.head.type"] = "branch"
    if source.get("remote"):
        found["vcs.repository.url.full"] = display(source["remote"])
    if source.get("tree") is not None:
        found["aos.source.tree"] = display(source["tree"])
    found["aos.source.dirty"] = bool(source.get("dirty"))
    return found
