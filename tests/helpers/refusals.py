"""Expecting a Refusal: the one helper the tests use to say "this must be refused", and what it was."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec

import pytest

from aos.refusals import Refusal

P = ParamSpec("P")


def refused(call: Callable[P, object], *args: P.args, **kwargs: P.kwargs) -> Refusal:
    """The Refusal ``call(*args, **kwargs)`` raises; the test fails when it returns instead."""
    with pytest.raises(Refusal) as info:
        call(*args, **kwargs)
    return info.value


def verify_refused(path: Path, key: Path | None = None) -> Refusal:
    """The Refusal ``verify_stream`` raises for the stream at ``path`` (checked against ``key``'s public key)."""
    from aos.signing import load_public_key
    from aos.verify import verify_stream

    return refused(verify_stream, path, load_public_key(key) if key is not None else None)
