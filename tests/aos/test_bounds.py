"""What the recorder keeps of command-controlled values stays within the event bound, and says what it cut."""

from __future__ import annotations

import hashlib

from aos.bounds import (
    ARGV_BUDGET,
    ARGV_ITEM,
    LIST_NOTES,
    REST_KEY,
    bounded_list,
    bounded_mapping,
    cut_text,
    fit_attrs,
    stored_size,
)
from aos.canonical import canonical_json
from aos.framing import MAX_EVENT_BYTES
from aos.text import display


def test_a_value_of_any_bytes_is_cut_to_its_share_with_its_size_and_digest() -> None:
    """Control bytes (6 in JSON), bytes that are not UTF-8 (base64) and emoji each fit ARGV_ITEM, noted whole."""
    for raw in (b"\x01" * (1 << 20), b"\xff" * 200_000, "\U0001f600".encode() * 50_000):
        stored = cut_text(raw)
        note = f"[CUT: {len(raw)} bytes, sha256 {hashlib.sha256(raw).hexdigest()}]"
        assert (True, True) == (stored_size(stored) <= ARGV_ITEM, display(stored).endswith(note))
    assert "short" == cut_text("short")


def test_a_million_args_are_one_bounded_list() -> None:
    """1,000,000 one-byte args: the budget's items, notes up to LIST_NOTES, then one note of the rest."""
    out = bounded_list(["a"] * 1_000_000)
    assert stored_size(out) <= ARGV_BUDGET + LIST_NOTES + 1024
    assert out[-1].startswith("[NOT RECORDED: ") and " more items, " in out[-1]  # noqa: PT018


def test_an_environment_of_many_names_keeps_a_budget_and_one_entry_for_the_rest() -> None:
    """50,000 long names: the entries past the budget are one "=" entry counting them; short values stay as they are."""
    env = {f"V{i:06d}" + "N" * 100: "[NOT RECORDED]" for i in range(50_000)}
    out = bounded_mapping(env)
    kept = len(out) - 1
    assert int(out[REST_KEY].split()[2]) + kept == 50_000
    assert {"[NOT RECORDED]"} == {v for k, v in out.items() if k != REST_KEY}
    assert stored_size(out) < 2 * (1 << 20)


def test_fit_attrs_cuts_any_attrs_to_the_bound_and_says_so() -> None:
    """Attrs of 20 processes of 512 KiB argv, and of a list of 700,000 numbers, fit; cut names their size."""
    procs = {"ended": [{"pid": i, "argv": bounded_list([b"\x01" * ARGV_ITEM] * 8)} for i in range(20)]}
    numbers = {"x": list(range(700_000))}
    fits = {}
    for name, attrs in (("procs", procs), ("numbers", numbers)):
        whole = canonical_json(attrs).encode()
        fitted = fits[name] = fit_attrs(attrs)
        assert len(canonical_json(fitted).encode()) < MAX_EVENT_BYTES
        assert (len(whole), hashlib.sha256(whole).hexdigest()) == (fitted["cut"]["bytes"], fitted["cut"]["sha256"])
    assert [{"path": "/x", "items": 700_000 - len(fits["numbers"]["x"])}] == fits["numbers"]["cut"]["lists"]
    small = {"a": 1}
    assert small is fit_attrs(small)
