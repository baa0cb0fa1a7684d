"""The recording commands' CLI surface: shared options, default output path, argument handling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from click.testing import CliRunner

from observe.cli.options import options_from_click, recording_options
from observe.cli.record import COMMANDS
from observe.recorder.record import RecordOptions
from tests.helpers.recorder import events
from tests.helpers.run import alpha


class TestRecordingOptions:
    def test_decorator_and_conversion(self) -> None:
        """recording_options adds every recording flag and options_from_click turns them into RecordOptions."""
        seen: dict[str, RecordOptions] = {}

        @click.command()
        @recording_options
        def probe(**kwargs: Any) -> None:
            seen["opts"] = options_from_click(**kwargs)

        result = CliRunner().invoke(
            probe,
            [
                "--out",
                "x.aos",
                "--artifact",
                "a",
                "--artifact",
                "b/*",
                "--timeout",
                "2.5",
                "--pty",
                "--sign-key",
                "k.key",
                "--mask",
                "s1",
                "--mask",
                "s2",
                "--label",
                "k=v",
                "--label",
                "e=a=b",
                "--quiet",
                "--artifact-max-bytes",
                "10",
                "--observe-devices",
                "nvml",
                "--sample-interval",
                "0.25",
            ],
        )
        assert 0 == result.exit_code, result.output
        assert (
            RecordOptions(
                out=Path("x.aos"),
                artifacts=("a", "b/*"),
                timeout=2.5,
                pty=True,
                sign_key=Path("k.key"),
                masks=("s1", "s2"),
                labels={"k": "v", "e": "a=b"},
                quiet=True,
                artifact_max_bytes=10,
                observe_devices="nvml",
                sample_interval=0.25,
            )
            == seen["opts"]
        )

    def test_defaults(self) -> None:
        """With no flags the options are RecordOptions' defaults."""
        seen: dict[str, RecordOptions] = {}

        @click.command()
        @recording_options
        def probe(**kwargs: Any) -> None:
            seen["opts"] = options_from_click(**kwargs)

        assert 0 == CliRunner().invoke(probe, []).exit_code
        assert RecordOptions() == seen["opts"]

    def test_bad_label_is_a_usage_error(self) -> None:
        """--label without '=' is refused as usage (exit 2)."""
        proc = alpha("observe", "record", "--label", "novalue", "--", "true")
        assert 2 == proc.returncode

    def test_commands_exported(self) -> None:
        """COMMANDS holds record, step, receipt, artifact and tail."""
        assert ["record", "step", "receipt", "artifact", "tail"] == [c.name for c in COMMANDS]


class TestRecordCommand:
    def test_default_out_under_aos_streams_dir_and_path_printed(self, tmp_path: Path) -> None:
        """Without --out the stream goes to ./aos-streams/<time>-<id>.aos (never ./aos/, the source package's name)
        and its path is printed on stderr."""
        proc = alpha("observe", "record", "--", "echo", "hi", cwd=tmp_path)
        assert (0, False) == (proc.returncode, (tmp_path / "aos").exists())
        made = list((tmp_path / "aos-streams").glob("*.aos"))
        assert 1 == len(made)
        stream_id = events(made[0])[0].attrs["stream_id"]
        assert made[0].name.endswith(f"-{stream_id}.aos")
        assert str(made[0]).encode() in proc.stderr

    def test_command_without_double_dash(self, tmp_path: Path) -> None:
        """record CMD ARGS works without '--', the command's own flags included."""
        out = tmp_path / "x.aos"
        proc = alpha("observe", "record", "--out", str(out), "sh", "-c", "echo $0 $1", "--flag", "--help")
        assert 0 == proc.returncode
        assert b"--flag --help\n" == proc.stdout

    def test_no_command_is_usage_error(self) -> None:
        """record without a command exits 2."""
        assert 2 == alpha("observe", "record").returncode
