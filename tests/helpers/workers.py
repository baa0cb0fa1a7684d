"""Marks that keep the tests sharing one expensive fixture on one worker (pytest-xdist's ``loadgroup``).

Under ``pytest -n logical --dist loadgroup`` (one worker per core); a session or module
fixture is built once in each worker that runs a test using it. Where that costs many
seconds, every test using it carries the same mark here, so one worker builds it once.
"""

from __future__ import annotations

import pytest

#: tests/conftest.py's ``two_gpu_tracker``: the two-GPU tracker sample, run once (about 20 s).
TWO_GPU_TRACKER = pytest.mark.xdist_group("two-gpu-tracker")

#: tests/samples/test_lane_ssh.py's ``lane_runs``: the three lanes over SSH, recorded once (about 45 s).
LANES_OVER_SSH = pytest.mark.xdist_group("lanes-over-ssh")

#: tests/observe/cli/test_resource.py: its limited processes run as ``nobody``, and the thread limit is the
#: threads that user holds: another such process ending gave one room to start some of its threads (DuckDB
#: then crashed with SIGSEGV, 2 in 30 with two at once). One at a time, with every other test that runs a
#: process as that user (the suite's PostgreSQL server runs as ``nobody`` too: not yet kept apart).
RESOURCE_LIMITS = pytest.mark.xdist_group("resource-limits")

#: tests/observe/interop/test_otlp_phoenix.py's ``phoenix``: a Phoenix server (about 13 s to start).
PHOENIX = pytest.mark.xdist_group("phoenix")
