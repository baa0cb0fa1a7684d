"""``aos.reader.string_set``: the value set a reader picks kinds of event with, built without importing pandas."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from aos.reader import string_set
from tests.helpers.paths import ROOT


def test_it_is_the_array_pyarrow_converts() -> None:
    for values in ([], ["stream.open"], ["device.observed", "artifact", "é", ""]):
        got = string_set(values)
        got.validate(full=True)
        assert pa.array(values, pa.string()).equals(got)
    kinds = pa.array(["artifact", "process.start", "é"])
    assert [True, False, True] == pc.is_in(kinds, value_set=string_set(["é", "artifact"])).to_pylist()


def test_it_imports_no_pandas() -> None:
    """The point of it: ``pa.array`` of Python objects imports pandas first (checked here, so that the test
    fails where it would not, rather than pass for nothing)."""
    pytest.importorskip("pandas", reason="pyarrow imports pandas only where it is installed")
    probe = (
        "import sys, pyarrow as pa\nfrom aos.reader import string_set\n"
        "string_set(['a', 'b'])\nprint('pandas' in sys.modules)\n"
        "pa.array(['a', 'b'])\nprint('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert ["False", "True"] == out.split()
