"""gates.session: a session's verdict from its members, each joined to its stream by digest."""

from __future__ import annotations

from gates.session import DeviceTally, MemberEvidence, distinct_check, merge_level, session_verdict
from gates.verdict import Check, Verdict


def _passed(gate: str = "exit-zero") -> Verdict:
    return Verdict.of(gate, "command", [Check("exit", "pass", "exited 0")], "pass (scope command)")


def _node(path: str, *uuids: str, expected: int | None = None, verdict: Verdict | None = None) -> MemberEvidence:
    tally = DeviceTally(set(uuids), {"simulated"})
    return MemberEvidence(path, "stream", "proven", None, "ab" * 32, expected, verdict or _passed(), tally)


class TestSessionVerdict:
    """Each rule of a session's verdict, with the forgery that must not pass it."""

    def test_every_member_proven_and_passing_passes(self) -> None:
        """Two proven nodes whose gates pass, with their own GPUs: pass, and the GPUs counted distinct."""
        v = session_verdict("exit-zero", "command", [_node("n0", "G0", expected=1), _node("n1", "G1", expected=1)])
        assert "pass" == v.verdict
        assert ["member:n0", "member:n1", "devices-distinct"] == [c.name for c in v.checks]

    def test_a_missing_member_is_inconclusive_naming_it(self) -> None:
        """A member that did not run: inconclusive, its name and reason in the check."""
        gone = MemberEvidence("rack-1/n3", "stream", "did-not-run", "no stream at nodes/n3.aos")
        v = session_verdict("exit-zero", "command", [_node("rack-1/n0", "G0"), gone])
        assert "inconclusive" == v.verdict
        failing = v.failing()
        assert [("member:rack-1/n3", "inconclusive")] == [(c.name, c.status) for c in failing]
        assert "no stream at nodes/n3.aos" in failing[0].reason
        assert "rack-1/n3" in v.summary

    def test_a_gpu_seen_by_two_members_fails(self) -> None:
        """The same GPU UUID in two nodes' observations (a copied stream, a forged observer): fail, both named."""
        v = session_verdict("exit-zero", "command", [_node("n0", "G0"), _node("n1", "G0")])
        assert ("fail", "devices-distinct") == (v.verdict, v.failing()[0].name)
        assert "G0 by n0 and n1" in v.failing()[0].reason

    def test_fewer_gpus_than_expected_fails(self) -> None:
        """A node expected to hold two GPUs whose recorder observed one: fail, naming what was seen."""
        v = session_verdict("exit-zero", "command", [_node("n0", "G0", expected=2)])
        assert "fail" == v.verdict
        assert "expected 2 GPUs" in v.failing()[0].reason

    def test_a_node_gate_that_fails_fails_the_session(self) -> None:
        """A node whose own gate failed fails the session, its digest named."""
        bad = Verdict.of("exit-zero", "command", [Check("exit", "fail", "exited 1")], "fail (scope command)")
        v = session_verdict("exit-zero", "command", [_node("n0", verdict=bad)])
        assert "fail" == v.verdict
        assert "over stream abababababababab" in v.failing()[0].reason

    def test_an_unsigned_member_is_never_a_pass(self) -> None:
        """A node proven on its labels alone (no key declared) whose gate passed, and an unsigned sub-session:
        each inconclusive by name, so the session is inconclusive, never pass."""
        from dataclasses import replace

        unsigned = replace(_node("n1", "G1", expected=1), unsigned=True)
        rack = MemberEvidence("rack-0", "session", "proven", unsigned=True)
        v = session_verdict("exit-zero", "command", [_node("n0", "G0", expected=1), unsigned, rack])
        assert "inconclusive" == v.verdict
        assert [("member:n1", "inconclusive"), ("member:rack-0", "inconclusive")] == [
            (c.name, c.status) for c in v.failing()
        ]
        assert all(c.reason.startswith("unsigned: ") for c in v.failing())

    def test_nothing_checked_is_inconclusive(self) -> None:
        """A session of proven sub-sessions only and no node: nothing established, inconclusive."""
        v = session_verdict("exit-zero", "command", [MemberEvidence("rack-0", "session", "proven")])
        assert "inconclusive" == v.verdict


class TestLevels:
    """``merge_level``: one cursor per member, the level's sealed list checked against the merge."""

    def test_a_sealed_list_that_differs_fails_naming_the_line(self) -> None:
        """A level whose sealed list drops a GPU one member's stream observed (a forged list): fail, the line named."""
        cursors = [iter([("G0", "n0")]), iter([("G1", "n1")])]
        level = merge_level("rack-0", cursors, iter([("G0", "n0")]))
        check = distinct_check([level])
        assert check is not None
        assert "fail" == check.status
        assert "rack-0: it lists None" not in check.reason
        assert "rack-0: line 2 lists None, its members' streams ('G1', 'n1')" in check.reason
        extra = merge_level("", [iter([("G0", "n0")])], iter([("G0", "n0"), ("G9", "n9")]))
        assert "after every GPU" in str(extra.differs)

    def test_a_duplicate_is_named_once_at_its_own_level(self) -> None:
        """A GPU twice inside rack-0 is named by rack-0's merge, not again by the top's (one cursor there); one in
        rack-0 and rack-1 by the top's; the count exact past the names shown."""
        rack0 = merge_level("rack-0", [iter([("G0", "n0")]), iter([("G0", "n1")])], None)
        top = merge_level(
            "",
            [iter([("G0", "rack-0/n0"), ("G0", "rack-0/n1"), ("G5", "rack-0/n1")]), iter([("G5", "rack-1/n0")])],
            None,
        )
        assert ["G0 by rack-0/n0 and rack-0/n1"] == rack0.shared
        assert ["G5 by rack-0/n1 and rack-1/n0"] == top.shared
        check = distinct_check([top, rack0])
        assert check is not None
        assert "fail" == check.status
        many = merge_level(
            "", [iter([(f"G{i:02d}", "a")]) for i in range(12)] + [iter([(f"G{i:02d}", "b") for i in range(12)])], None
        )
        assert (12, 10) == (many.shared_count, len(many.shared))
        assert "(and 2 more)" in str(distinct_check([many]).reason)  # type: ignore[union-attr]

    def test_distinct_gpus_pass_counted_at_the_top(self) -> None:
        """Distinct GPUs pass, counted by the top level; no GPU at all: no check."""
        top = merge_level("", [iter([("G0", "n0")]), iter([("G1", "n1")])], iter([("G0", "n0"), ("G1", "n1")]))
        check = distinct_check([top])
        assert check is not None
        assert ("pass", "2 GPUs, each observed by one member") == (check.status, check.reason)
        assert distinct_check([merge_level("", [], None)]) is None
