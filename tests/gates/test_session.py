"""gates.session: a session's verdict from its members, each joined to its stream by digest."""

from __future__ import annotations

from gates.session import DeviceTally, MemberEvidence, session_verdict
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

    def test_nothing_checked_is_inconclusive(self) -> None:
        """A session of proven sub-sessions only and no node: nothing established, inconclusive."""
        v = session_verdict("exit-zero", "command", [MemberEvidence("rack-0", "session", "proven")])
        assert "inconclusive" == v.verdict
