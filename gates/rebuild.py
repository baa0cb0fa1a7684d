"""Judging source and rebuild identity: what the recorder recorded of the source, and what it rebuilt.

The gate never runs anything: the recorder records ``stream.open``'s ``source``
before the command starts and, for a ``[[rebuild]]`` rule, checks the recorded
commit out into a fresh tree of its own after the command ends, runs the rule's
command there as its step ``rebuild`` and captures the outputs
(observe/recorder/rebuild.py). Here those events are compared:

- no repository, a source git could not read, a tree dirty at the start: ``inconclusive``;
- no rebuild step of the recorder, a checkout it could not make or verify, a
  rebuild that did not exit 0: ``inconclusive``;
- a captured executable with no rebuilt file of its name, or other bytes: ``fail``;
- every one the same bytes (at least one compared): ``pass``.

A stream whose ``stream.open`` has no ``source`` key at all was recorded before
the recorder recorded sources: the engine leaves these rules out for it
(``gates.engine.versioned_out``), so old evidence is judged as it was sealed.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any, Protocol

from aos.text import display, os_text
from gates.evidence import Artifact, Evidence, Step
from gates.typing import Findings, Outcome

__all__ = ["SOURCE_CHECK", "RebuildSpec", "describe_source", "evaluate_rebuild", "source_identity"]

#: The registered check that reports the recorded source (gates/checks.py).
SOURCE_CHECK = "source-identity"


class RebuildSpec(Protocol):
    """What the comparison reads of a ``gates.language.RebuildRule`` (kept apart: no import cycle)."""

    @property
    def id(self) -> str: ...

    @property
    def compare(self) -> str | None: ...


def describe_source(source: Mapping[str, Any] | None) -> str:
    """The recorded source in words: commit, branch and whether the tree was clean."""
    if source is None:
        return "no git repository held the working directory"
    if "error" in source:
        return f"the source could not be read: {source.get('error')}"
    commit = str(source.get("commit"))
    branch = source.get("branch")
    where = f"commit {commit}" + (f" (branch {display(branch)})" if branch is not None else " (detached)")
    if not source.get("dirty"):
        return f"{where}, tree {source.get('tree')}, clean at the start"
    changes = source.get("changes") if isinstance(source.get("changes"), dict) else {}
    assert isinstance(changes, dict)
    parts = [f"{changes.get('tracked', '?')} tracked file(s) changed", f"{changes.get('untracked', '?')} untracked"]
    if changes.get("hidden"):
        parts.append(f"{changes['hidden']} index entries hidden from git (assume-unchanged or skip-worktree)")
    if changes.get("error"):
        parts.append(str(changes["error"]))
    return f"{where}, tree {source.get('tree')}, dirty at the start: " + ", ".join(parts)


def source_identity(ev: Evidence, args: Mapping[str, Any]) -> Outcome:
    """The source the recording describes (commit, branch, clean or dirty), as the recorder recorded it."""
    cited = (ev.open.seq,) if ev.open is not None else ()
    return Outcome("pass", "recorded source: " + describe_source(ev.source if ev.source_recorded else None), cited)


def _executables(rule: RebuildSpec, ev: Evidence, f: Findings) -> list[Artifact]:
    """The run's captured executables to compare: the targets of ``compare`` receipts, or every executable file."""
    if rule.compare is None:
        found = [
            a
            for a in ev.artifacts_matching("**")
            if a.origin is None and a.event.attrs.get("kind") == "file" and int(a.event.attrs.get("mode", 0)) & 0o111
        ]
        return sorted(found, key=lambda a: a.path)
    out: dict[str, Artifact] = {}
    receipts = ev.receipts_named(rule.compare)
    if not receipts:
        f.inconclusive(f"no {rule.compare!r} receipt names an executable to compare")
    for r in receipts:
        f.use([r.seq])
        target = r.fields.get("target")
        if not isinstance(target, str) or not target:
            f.inconclusive(f"{rule.compare!r} receipt (seq {r.seq}) names no target")
            continue
        art = ev.artifact(target)
        if art is None or art.origin is not None:
            f.inconclusive(f"{target} ({rule.compare!r} target) was not captured, so it cannot be compared")
            continue
        out[art.path] = art
    return [out[p] for p in sorted(out)]


def _rebuild_step(rule: RebuildSpec, ev: Evidence) -> Step | None:
    steps = [s for s in ev.rebuild_steps if s.start.attrs.get("rule") == rule.id and s.name == "rebuild"]
    return steps[-1] if steps else None


def _rebuilt_for(step: Step, ev: Evidence) -> dict[str, Artifact]:
    """The files a rebuild step captured, by their path relative to its OUT."""
    out = os_text(step.start.attrs.get("out")) or ""
    found: dict[str, Artifact] = {}
    for a in ev.rebuilt:
        if a.event.step != step.span:
            continue
        rel = a.path[len(out.rstrip("/")) + 1 :] if out and a.path.startswith(out.rstrip("/") + "/") else a.path
        found[rel] = a
    return found


def _counterpart(run: Artifact, rebuilt: dict[str, Artifact]) -> tuple[str | None, str]:
    """The rebuilt file of ``run``'s name (the longest common path tail decides between several)."""
    name = posixpath.basename(run.path)
    cands = [rel for rel in rebuilt if posixpath.basename(rel) == name]
    if len(cands) > 1:
        tails = [rel for rel in cands if run.path == rel or run.path.endswith("/" + rel)]
        cands = sorted(tails, key=len, reverse=True)[:1] if tails else cands
    if not cands:
        return None, f"the rebuild produced no file named {name}"
    if len(cands) > 1:
        return None, f"the rebuild produced {len(cands)} files named {name} ({', '.join(sorted(cands))}): ambiguous"
    return cands[0], ""


def evaluate_rebuild(rule: RebuildSpec, ev: Evidence) -> Outcome:
    """Pass only when every executable to compare has a rebuilt file of its name with the same bytes."""
    f = Findings()
    if ev.open is not None:
        f.use([ev.open.seq])
    runs = _executables(rule, ev, f)
    for a in runs:
        f.use(a.seqs)
    names = ", ".join(a.path for a in runs) or "(none)"
    source = ev.source
    if source is None or "error" in source or source.get("dirty"):
        f.inconclusive(f"{describe_source(source)}: nothing committed to rebuild {names} from")
        return f.outcome("")
    commit = str(source.get("commit"))
    step = _rebuild_step(rule, ev)
    if step is None:
        f.inconclusive(f"the recorder did not rebuild commit {commit} (recorded without this gate's rebuild)")
        return f.outcome("")
    f.use(step.seqs)
    attrs = step.start.attrs
    if attrs.get("commit") != commit or attrs.get("tree") != source.get("tree"):
        f.fail(f"the rebuild checked out {attrs.get('commit')} (tree {attrs.get('tree')}), not the recorded {commit}")
        return f.outcome("")
    end = step.end.attrs if step.end is not None else {}
    if end.get("error"):
        f.inconclusive(f"the rebuild of commit {commit} did not run: {end['error']}")
        return f.outcome("")
    if not step.finished or step.exit_code != 0 or step.signal:
        tail = bytes(step.stderr[-400:]).decode("utf-8", "replace").strip()
        f.use(step.output_seqs)
        f.inconclusive(f"the rebuild of commit {commit} {step.describe_exit()}" + (f"; stderr: {tail}" if tail else ""))
        return f.outcome("")
    rebuilt = _rebuilt_for(step, ev)
    if not runs:
        f.inconclusive("the run captured no executable to compare with the rebuild")
    same: list[str] = []
    differ: list[str] = []
    absent: list[str] = []
    for run in runs:
        rel, why = _counterpart(run, rebuilt)
        if rel is None:
            absent.append(f"{run.path} ({why})")
            continue
        other = rebuilt[rel]
        f.use(other.seqs)
        mine, how = run.sha256()
        theirs, how_rebuilt = other.sha256()
        if mine is None or theirs is None:
            f.inconclusive(f"{run.path} cannot be compared: {how if mine is None else how_rebuilt}")
        elif mine != theirs:
            differ.append(f"{run.path} (sha256 {mine}; rebuilt {rel}: {theirs})")
        else:
            same.append(run.path)
    if differ:
        f.fail(f"{len(differ)} executable(s) differ from what commit {commit} builds: " + "; ".join(differ))
    if absent:
        f.fail(f"{len(absent)} executable(s) that commit {commit} does not build: " + "; ".join(absent))
    return f.outcome(f"{len(same)} executable(s) rebuilt byte for byte from commit {commit}: {', '.join(same)}")
