"""The CI job a run is started in, from the environment the CI system sets.

Recognised: GitHub Actions (``GITHUB_ACTIONS=true``: the job URL is
``$GITHUB_SERVER_URL/$GITHUB_REPOSITORY/actions/runs/$GITHUB_RUN_ID``, with
``/attempts/$GITHUB_RUN_ATTEMPT`` when set; the commit ``$GITHUB_SHA``), GitLab
(``GITLAB_CI=true``: ``$CI_JOB_URL``, ``$CI_COMMIT_SHA``) and Buildkite
(``BUILDKITE=true``: ``$BUILDKITE_BUILD_URL``, ``$BUILDKITE_COMMIT``). A value
the environment lacks is null; outside CI there is no job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from observe.env import BuildkiteVars, GitHubVars, GitLabVars

__all__ = ["CiJob", "ci_job"]


@dataclass(frozen=True)
class CiJob:
    """Where a run ran: ``provider`` (``github``, ``gitlab``, ``buildkite``), the job's URL, the commit."""

    provider: str
    job_url: str | None
    commit: str | None


def _get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def ci_job(env: Mapping[str, str]) -> CiJob | None:
    """The CI job ``env`` names, or None outside a recognised CI system."""
    if _get(env, GitHubVars.ACTIONS) == "true":
        server, repo, run = (_get(env, n) for n in (GitHubVars.SERVER_URL, GitHubVars.REPOSITORY, GitHubVars.RUN_ID))
        url = None
        if server and repo and run:
            url = f"{server.rstrip('/')}/{repo}/actions/runs/{run}"
            attempt = _get(env, GitHubVars.RUN_ATTEMPT)
            if attempt:
                url += f"/attempts/{attempt}"
        return CiJob("github", url, _get(env, GitHubVars.SHA))
    if _get(env, GitLabVars.CI) == "true":
        return CiJob("gitlab", _get(env, GitLabVars.JOB_URL), _get(env, GitLabVars.COMMIT_SHA))
    if _get(env, BuildkiteVars.BUILDKITE) == "true":
        return CiJob("buildkite", _get(env, BuildkiteVars.BUILD_URL), _get(env, BuildkiteVars.COMMIT))
    return None
