"""The suite's measured test durations (tests/durations.json): what makes a plain test ``slow``.

A test that starts a real server, browser, lane or CI job is ``slow`` by the fixtures it uses
(tests/conftest.py, ``SLOW_FIXTURES``). Every other test is ``slow`` when its last measured call took
:data:`SLOW_SECONDS` or more: stress loops, fuzzing, bounded-memory runs at their bound, many recordings.
The file is measured, not guessed: refresh it from a JUnit report of the whole suite, as ``.ci/run``
writes one (``.ci-out/pytest.xml``)::

    python -m tests.helpers.durations .ci-out/pytest.xml

A test missing from the file (a new one) counts as fast until the next refresh.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from pathlib import Path

from defusedxml import ElementTree

from tests.helpers.paths import TESTS

#: Where the durations live, one ``{node id: seconds}`` object, sorted.
DURATIONS = TESTS / "durations.json"
#: A test whose measured call took this long or more is ``slow``.
SLOW_SECONDS = 1.0


#: The ``@GROUP`` that ``--dist loadgroup`` puts after a grouped test's name (tests.helpers.workers).
_GROUP = re.compile(r"@[\w-]+$")


def node_id(classname: str, name: str) -> str:
    """pytest's node id of a JUnit ``testcase``, as collected (no worker group): ``tests.a.test_b.TestC`` and
    ``t[x]@sshd`` give ``tests/a/test_b.py::TestC::t[x]``."""
    name = _GROUP.sub("", name)
    parts = classname.split(".")
    module = max(i for i, part in enumerate(parts) if part.startswith("test_") or part == "conftest")
    return "/".join(parts[: module + 1]) + ".py::" + "::".join([*parts[module + 1 :], name])


def from_junit(report: Path) -> dict[str, float]:
    """Every test case's measured seconds in a JUnit report, by node id (skipped cases left out)."""
    measured: dict[str, float] = {}
    for case in ElementTree.parse(report).iter("testcase"):
        if case.find("skipped") is None:
            measured[node_id(case.get("classname", ""), case.get("name", ""))] = round(float(case.get("time", 0)), 2)
    return dict(sorted(measured.items()))


@functools.cache
def measured() -> dict[str, float]:
    """tests/durations.json, read once."""
    if not DURATIONS.is_file():
        return {}
    loaded: dict[str, float] = json.loads(DURATIONS.read_text())
    return loaded


def slow_by_time(nodeid: str) -> float | None:
    """The measured seconds of ``nodeid`` when they make it ``slow``, else None."""
    seconds = measured().get(nodeid)
    return seconds if seconds is not None and seconds >= SLOW_SECONDS else None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.helpers.durations JUNIT_XML", file=sys.stderr)
        return 2
    found = from_junit(Path(argv[0]))
    DURATIONS.write_text(json.dumps(found, indent=0, sort_keys=True) + "\n")
    slow = sum(1 for s in found.values() if s >= SLOW_SECONDS)
    print(f"{DURATIONS}: {len(found)} tests, {slow} of them {SLOW_SECONDS} s or more")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
