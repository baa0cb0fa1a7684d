"""Shared fixtures. Keep each one small and documented; append new ones in their own section."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ASSETS = Path(__file__).resolve().parent / "assets"

# -- format assets (tests/assets, made by tests/assets/make_assets.py) ---------------------


def _load_make_assets() -> ModuleType:
    spec = importlib.util.spec_from_file_location("aos_test_make_assets", ASSETS / "make_assets.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def asset() -> Callable[[str], Path]:
    """``asset(name)``: the path of a committed known-good or known-bad file in tests/assets."""

    def _asset(name: str) -> Path:
        path = ASSETS / name
        if not path.is_file():
            raise FileNotFoundError(f"no asset {name!r} in {ASSETS} (run tests/assets/make_assets.py)")
        return path

    return _asset


@pytest.fixture(scope="session")
def asset_manifest() -> dict[str, dict[str, Any]]:
    """tests/assets/MANIFEST.json: for each asset, the refusal ``verify`` must give and what is wrong."""
    manifest: dict[str, dict[str, Any]] = json.loads((ASSETS / "MANIFEST.json").read_text())
    return manifest


@pytest.fixture(scope="session")
def surgery() -> ModuleType:
    """The byte-surgery helpers of make_assets.py (split, encode_batch, rehash, reseal, write_sample, ...)."""
    return _load_make_assets()


# -- isolation from an enclosing recording ---------------------------------------------------

#: Variables a recording (or a lane config) gives its command. The suite itself runs under
#: `alpha observe gate exit-zero` in .ci/run, so without this every test would be "inside
#: a recording" and its receipts would land in CI's own stream.
_RECORDING_ENV = (
    "AOS_STREAM",
    "AOS_RECEIPTS",
    "AOS_CONTROL",
    "AOS_STEP",
    "ALPHA_PARTITIONED_DEVICE_CONFIG",
    "ALPHA_COORDINATE_DEVICE_CONFIG",
    "ALPHA_INDEPENDENT_DEVICE_CONFIG",
    "GITHUB_ACTIONS",
    # the CI the suite itself runs in: its files and folds are not the tests' to write
    "GITHUB_OUTPUT",
    "GITHUB_STEP_SUMMARY",
    "GITLAB_CI",
    "BUILDKITE",
    "AOS_ALPHA",
    "NO_COLOR",
    "FORCE_COLOR",
)


@pytest.fixture(autouse=True)
def _outside_any_recording(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts outside any recording, with no lane config and no CI annotations."""
    for name in _RECORDING_ENV:
        monkeypatch.delenv(name, raising=False)
