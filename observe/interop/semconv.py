"""OpenTelemetry's CI/CD and VCS attributes for a run, from the CI variables ``stream.open`` recorded.

Only the environment the recorder itself started with counts (``stream.open``'s
``env``, written before the command ran), so the recorded command cannot change
what its run is attributed to. A value the recorder did not record
(``[NOT RECORDED]``) or an empty one gives no attribute. The names are those of
the semantic conventions' ``cicd.*`` and ``vcs.*`` registries; each CI system gives its own
(``attributes`` of its module in ``observe.ci.systems``; docs/CI.md, "OTLP traces", lists the mapping).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["TASK_RUN_RESULT", "ci_attributes", "source_attributes", "task_run_result"]

#: The semantic conventions' attribute for how a task run ended, and the values it takes.
TASK_RUN_RESULT = "cicd.pipeline.task.run.result"
_RESULTS = ("success", "failure", "error", "timeout", "cancellation", "skip")


def ci_attributes(env: Mapping[str, Any]) -> dict[str, str]:
    """The ``cicd.*`` and ``vcs.*`` attributes the recorded ``env`` gives (empty outside a known CI)."""
    from observe.ci.systems import system_for
    from observe.secrets.envpolicy import NOT_RECORDED

    recorded = {k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str)}

    def get(name: str) -> str | None:
        value = recorded.get(name)
        return value if value and value != NOT_RECORDED else None

    system = system_for({k: v for k, v in recorded.items() if v != NOT_RECORDED})
    if system is None:
        return {}
    return {k: v for k, v in system.attributes(get).items() if v is not None and v != NOT_RECORDED}


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


def task_run_result(verdict: Any, *, timed_out: bool, interrupted: bool) -> str | None:
    """The ``cicd.pipeline.task.run.result`` of a gated run; None when no verdict was sealed.

    ``timeout`` when ``--timeout`` ended the command, ``cancellation`` when a signal
    reached the recorder while the command ran, else the verdict: ``pass`` is
    ``success``, ``fail`` ``failure``, ``inconclusive`` (the evidence does not
    decide) ``error``. The semantic conventions' ``skip`` is never given: a
    recorded run ran.
    """
    if verdict not in ("pass", "fail", "inconclusive"):
        return None
    if timed_out:
        result = "timeout"
    elif interrupted:
        result = "cancellation"
    else:
        result = {"pass": "success", "fail": "failure", "inconclusive": "error"}[verdict]
    assert result in _RESULTS
    return result
