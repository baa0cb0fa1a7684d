"""``show`` says each entry the recorder cut to stay within the event bound, with its size and what it kept."""

from __future__ import annotations

import json
from pathlib import Path

from aos.bounds import bounded_list, bounded_mapping, fit_attrs
from aos.writer import StreamWriter
from observe.readback.summary import KEEP, format_summary, summarize, summary_json

ITEM = b"\xff" * 120_000


def test_show_prints_each_cut_entrys_size(tmp_path: Path) -> None:
    """A cut argv item, an environment past its budget and attrs cut whole are each one line with their sizes."""
    out = tmp_path / "s.aos"
    env = bounded_mapping({f"V{i:06d}" + "N" * 100: "[NOT RECORDED]" for i in range(20_000)})
    with StreamWriter(out, background_flush=False) as w:
        w.append("stream.open", {"argv": bounded_list(["cmd", ITEM]), "cwd": "/", "host": "h", "env": env})
        w.append("process.stray", fit_attrs({"ended": [{"pid": i, "argv": ["x" * 1000]} for i in range(10_000)]}))
        w.seal()
    s = summarize(out)
    text = format_summary(s)
    assert "command    cmd " in text
    assert "... (117.2 KiB, 47.9 KiB recorded)'" in text.split("\n")[1]
    assert len(text.split("\n")[1]) < 300
    assert "  stream.open argv[1]: 117.2 KiB, 47.9 KiB recorded (sha256 " in text
    assert any(line.startswith("  stream.open env: ") and "variables not recorded" in line for line in text.split("\n"))
    assert "  process.stray (seq 1): attrs of " in text
    assert (KEEP, True) == (len(s.cuts), f"  ... and {s.cuts_omitted} more entries (show keeps" in text)
    assert s.cuts == json.loads(summary_json(s, str(out)))["cut"]["entries"]
