"""GitLab CI (``GITLAB_CI`` set, not ``0``/``false``/``no``/``off``): collapsible sections.

Each step is a collapsible section
(``ESC[0Ksection_start:TIME:NAME[collapsed=true]\\rESC[0KHEADER``, then ``section_end``);
sections nest. This module is light (standard library only).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping

from observe.ci.systems import CiSystem, Get, one_line, truthy, without_credentials
from observe.env import GitLabVars

__all__ = ["SYSTEM"]

_SECTION_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def _detects(env: Mapping[str, str]) -> bool:
    return truthy(env.get(GitLabVars.CI))


def _fold_open(count: int, name: str) -> tuple[str, str]:
    section = f"step_{count}_{_SECTION_NAME.sub('_', name)[:64]}"
    return f"\x1b[0Ksection_start:{int(time.time())}:{section}[collapsed=true]\r\x1b[0K{one_line(name)}\n", section


def _fold_close(section: str, exit_code: object) -> str:
    return f"\x1b[0Ksection_end:{int(time.time())}:{section}\r\x1b[0K\n"


def _attributes(get: Get) -> dict[str, str | None]:
    path = get("CI_PROJECT_PATH")
    return {
        "cicd.pipeline.name": path,
        "cicd.pipeline.run.id": get("CI_PIPELINE_ID"),
        "cicd.pipeline.run.url.full": get("CI_PIPELINE_URL"),
        "cicd.pipeline.task.name": get("CI_JOB_NAME"),
        "cicd.pipeline.task.run.id": get("CI_JOB_ID"),
        "cicd.pipeline.task.run.url.full": get(GitLabVars.JOB_URL),
        "vcs.provider.name": "gitlab",
        "vcs.repository.url.full": without_credentials(get("CI_PROJECT_URL")),
        "vcs.repository.name": path.rsplit("/", 1)[-1] if path else None,
        "vcs.ref.head.revision": get(GitLabVars.COMMIT_SHA),
        "vcs.ref.head.name": get("CI_COMMIT_REF_NAME"),
        "vcs.ref.head.type": "tag" if get("CI_COMMIT_TAG") else ("branch" if get("CI_COMMIT_BRANCH") else None),
        "vcs.change.id": get("CI_MERGE_REQUEST_IID"),
    }


SYSTEM = CiSystem(
    name="gitlab",
    title="GitLab CI",
    detects=_detects,
    nests=True,
    fold_open=_fold_open,
    fold_close=_fold_close,
    attributes=_attributes,
    job_url="cicd.pipeline.task.run.url.full",
    recorded_names=frozenset(
        {
            "GITLAB_CI",
            "CI_JOB_ID",
            "CI_JOB_URL",
            "CI_JOB_NAME",
            "CI_JOB_STAGE",
            "CI_PIPELINE_ID",
            "CI_PIPELINE_URL",
            "CI_PIPELINE_SOURCE",
            "CI_COMMIT_SHA",
            "CI_COMMIT_SHORT_SHA",
            "CI_COMMIT_REF_NAME",
            "CI_COMMIT_BRANCH",
            "CI_COMMIT_TAG",
            "CI_DEFAULT_BRANCH",
            "CI_MERGE_REQUEST_IID",
            "CI_PROJECT_ID",
            "CI_PROJECT_PATH",
            "CI_PROJECT_URL",
            "CI_SERVER_URL",
            "CI_RUNNER_ID",
        }
    ),
)
