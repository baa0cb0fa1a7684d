"""``Cited``: the seqs a check cites, as bits; what it gives is what a sorted set gives."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gates.cited import Cited
from gates.typing import Findings
from gates.verdict import MAX_EVIDENCE, Check

seqs = st.lists(st.integers(min_value=-(1 << 20), max_value=1 << 40), max_size=300)


@given(seqs, st.integers(min_value=0, max_value=400))
def test_lowest_and_count_are_a_sorted_sets(values: list[int], n: int) -> None:
    c = Cited(values)
    assert sorted(set(values))[:n] == c.lowest(n)
    assert len(set(values)) == len(c)


def test_duplicates_across_blocks_count_once() -> None:
    c = Cited([5, 70_000, 5])
    c.add([70_000, 65_535, 65_536])
    assert ([5, 65_535, 65_536, 70_000], 4) == (c.lowest(10), len(c))


def test_a_check_citing_more_than_a_verdict_holds_seals_as_before() -> None:
    """Findings keeps the lowest MAX_EVIDENCE seqs and counts the rest: the sealed check is the one the
    whole tuple of cited seqs (duplicates, any order) gives."""
    cited = [*range(3 * MAX_EVIDENCE, 0, -1), *range(0, MAX_EVIDENCE, 7)]
    f = Findings()
    f.use(cited)
    out = f.outcome("ok")
    assert (MAX_EVIDENCE, 2 * MAX_EVIDENCE + 1) == (len(out.evidence), out.evidence_omitted)
    lean = Check("c", out.status, out.reason, out.evidence, out.evidence_omitted)
    assert Check("c", "pass", "ok", tuple(cited)).to_attrs() == lean.to_attrs()
