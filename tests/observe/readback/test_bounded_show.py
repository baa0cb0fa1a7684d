"""``show``, ``show --json`` and ``report`` keep a bounded amount of a stream of many receipts or kinds, and say
how much they left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aos.writer import StreamWriter
from observe.readback.summary import KEEP, STATUSES, format_summary, summarize, summary_json
from tests.aos.test_bounded_reading import LIMIT_MIB, peak_rss

#: Receipts in the stream: each name 4 KiB and distinct, so that keeping them all would take over 200 MB.
RECEIPTS = 50_000
NAME = 4096
#: Distinct event kinds in the other stream.
KINDS = 20_000


def _name(i: int) -> str:
    return f"{i:08d}" + "n" * (NAME - 8)


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A sealed stream of RECEIPTS receipts of distinct long names (and many statuses), and one of KINDS kinds."""
    root = tmp_path_factory.mktemp("many")
    receipts, kinds = root / "receipts.aos", root / "kinds.aos"
    with StreamWriter(receipts, background_flush=False) as w:
        w.append("stream.open", {"argv": ["many"], "cwd": "/", "host": "h"})
        for i in range(RECEIPTS):
            w.append("receipt", {"name": _name(i), "status": f"s{i % (STATUSES * 2)}"})
        w.seal()
    with StreamWriter(kinds, background_flush=False) as w:
        w.append("stream.open", {"argv": ["many"], "cwd": "/", "host": "h"})
        for i in range(KINDS):
            w.append(f"k{i:06d}." + "k" * 1024, {})
        w.seal()
    return {"receipts": receipts, "kinds": kinds}


def test_show_keeps_the_first_receipts_and_counts_the_rest(many: dict[str, Path]) -> None:
    """The summary keeps KEEP receipts, tallies STATUSES statuses by name, and counts every one."""
    s = summarize(many["receipts"])
    assert (KEEP, RECEIPTS - KEEP) == (len(s.receipts), s.omitted["receipts"])
    others = sum(1 for i in range(RECEIPTS) if i % (STATUSES * 2) >= STATUSES)
    assert (STATUSES, others) == (len(s.receipt_counts), s.receipt_other_statuses)
    text = format_summary(s)
    assert f"receipts   {RECEIPTS} (" in text
    assert f"... and {RECEIPTS - KEEP} more" in text
    assert f"{others} of other statuses" in text
    doc = json.loads(summary_json(s, str(many["receipts"])))
    assert ({"steps": 0, "receipts": RECEIPTS - KEEP, "artifacts": 0, "gpu_processes": 0}, KEEP) == (
        doc["omitted"],
        len(doc["receipts"]),
    )


@pytest.mark.parametrize("argv", [["show", "--json"], ["report", "-o", "page.html"]])
def test_show_and_report_of_many_receipts_stay_in_bounded_memory(
    many: dict[str, Path], tmp_path: Path, argv: list[str]
) -> None:
    """show --json and report of 50,000 receipts of 4 KiB names stay under 200 MB and say what they left out."""
    out = tmp_path / "stdout"
    code, rss, err = peak_rss(["observe", *argv[:1], str(many["receipts"]), *argv[1:]], tmp_path, str(out))
    assert (0, True) == (code, rss < LIMIT_MIB), (rss, err[-2000:])
    said = (tmp_path / "page.html").read_text() if argv[0] == "report" else out.read_text()
    if argv[0] == "show":
        assert RECEIPTS - KEEP == json.loads(said)["omitted"]["receipts"]
    else:
        assert f"{RECEIPTS - KEEP} more" in said, said[-3000:]


def test_report_counts_a_bounded_number_of_kinds(many: dict[str, Path]) -> None:
    """The report model counts the first kinds by name and every further kind's events together."""
    from observe.report.model import CAPS, build_model

    m = build_model(many["kinds"])
    assert (CAPS.kinds, True) == (len(m.kinds), m.other_kinds > KINDS - CAPS.kinds)
    assert m.events == sum(m.kinds.values()) + m.other_kinds
