"""Where things are, named once: the repository, the tests' committed files, the samples and the docs.

Every test reaches a file of the repository through these constants, never through its own
``Path(__file__)`` arithmetic, so a test module may live at any depth below tests/.
"""

from __future__ import annotations

from pathlib import Path

#: The repository's root (the folder holding pyproject.toml).
ROOT = Path(__file__).resolve().parents[2]
#: tests/ itself.
TESTS = ROOT / "tests"
#: Committed known-good and known-bad files (tests/assets, made by tests/assets/make_assets.py).
ASSETS = TESTS / "assets"
#: Hostile commands the trust-boundary tests run under the recorder.
ATTACKS = TESTS / "attacks"
#: Scripts that break one device rule at a time.
MUTANTS = TESTS / "mutants"
#: The committed samples: the reference lane, evidence, vectors, the tracker example.
SAMPLES = ROOT / "samples"
#: The user documentation, checked against the code.
DOCS = ROOT / "docs"
