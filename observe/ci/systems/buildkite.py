"""Buildkite (``BUILDKITE`` set, not ``0``/``false``/``no``/``off``): groups, and a summary to annotate.

Each step opens a ``--- NAME`` group (groups do not nest), and a step that failed
re-opens it with ``^^^ +++``. The verdict's markdown summary is written beside the
stream (``STREAM.md``, or ``--summary``) and the ``buildkite-agent annotate`` line
that shows it is said. Every ``BUILDKITE_*`` value is recorded unless its name looks
secret. This module is light (standard library only).
"""

from __future__ import annotations

from collections.abc import Mapping

from observe.ci.systems import CiSystem, Get, Publication, one_line, truthy, without_credentials
from observe.env import BuildkiteVars

__all__ = ["SYSTEM"]

#: The ``buildkite-agent annotate --style`` of each verdict.
_STYLE = {"pass": "success", "fail": "error", "inconclusive": "warning"}


def _detects(env: Mapping[str, str]) -> bool:
    return truthy(env.get(BuildkiteVars.BUILDKITE))


def _fold_open(count: int, name: str) -> tuple[str, str]:
    return f"--- {one_line(name)}\n", ""


def _fold_close(section: str, exit_code: object) -> str:
    return "^^^ +++\n" if exit_code != 0 else ""  # expand the group that just failed


def _attributes(get: Get) -> dict[str, str | None]:
    build_url, job = get(BuildkiteVars.BUILD_URL), get("BUILDKITE_JOB_ID")
    pr = get("BUILDKITE_PULL_REQUEST")
    return {
        "cicd.pipeline.name": get("BUILDKITE_PIPELINE_NAME") or get("BUILDKITE_PIPELINE_SLUG"),
        "cicd.pipeline.run.id": get("BUILDKITE_BUILD_ID"),
        "cicd.pipeline.run.url.full": build_url,
        "cicd.pipeline.task.name": get("BUILDKITE_LABEL") or get("BUILDKITE_STEP_KEY"),
        "cicd.pipeline.task.run.id": job,
        "cicd.pipeline.task.run.url.full": f"{build_url}#{job}" if build_url and job else None,
        "vcs.repository.url.full": without_credentials(get("BUILDKITE_REPO")),
        "vcs.ref.head.revision": get(BuildkiteVars.COMMIT),
        "vcs.ref.head.name": get("BUILDKITE_BRANCH"),
        "vcs.ref.head.type": "tag" if get("BUILDKITE_TAG") else ("branch" if get("BUILDKITE_BRANCH") else None),
        "vcs.ref.base.name": get("BUILDKITE_PULL_REQUEST_BASE_BRANCH"),
        "vcs.change.id": pr if pr and pr.isdigit() else None,
    }


def _publish(p: Publication) -> None:
    if p.summary is not None:
        style = _STYLE[p.verdict.verdict]
        p.say(
            f"summary in {p.summary} (buildkite-agent annotate --style {style} --context alpha-observe < {p.summary})"
        )


SYSTEM = CiSystem(
    name="buildkite",
    title="Buildkite",
    detects=_detects,
    nests=False,
    fold_open=_fold_open,
    fold_close=_fold_close,
    attributes=_attributes,
    job_url="cicd.pipeline.run.url.full",
    recorded_names=frozenset({"BUILDKITE"}),
    recorded_prefixes=("BUILDKITE_",),
    publish=_publish,
    summary_beside_stream=True,
)
