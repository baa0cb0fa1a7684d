"""Secrets in real recordings: the env allow-list, the mask sources, masking after parsing, artifacts."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aos.event import Event
from observe.recorder import artifacts
from observe.secrets.envpolicy import ALLOWED_NAMES, ALLOWED_PREFIXES, NOT_RECORDED, is_allowed, recorded_env
from observe.secrets.masking import MASK, SECRET_NAME_PARTS, SECRET_NAME_WORDS, Scanner, SecretSet
from observe.secrets.sources import read_mask_file, secrets_for_recording
from tests.helpers.paths import DOCS
from tests.helpers.recorder import events, one, output, record
from tests.helpers.run import alpha, child_env


def _blob(evs: list[Event]) -> bytes:
    """Every event's attrs text and data, one byte string (to search)."""
    return b"\n".join(e.attrs_json.encode() + b"\0" + (e.step or "").encode() + b"\0" + (e.data or b"") for e in evs)


def _u_escaped(text: str) -> str:
    """``text`` with every character written as a JSON ``\\uXXXX`` escape."""
    return "".join(f"\\u{ord(c):04x}" for c in text)


class TestEnvPolicy:
    def test_names_always_values_by_allow_list(self) -> None:
        """Every name is kept; values only for the allow-list, --env names and empty values."""
        env = {
            "PATH": "/usr/bin",
            "GITHUB_SHA": "abc123",
            "LC_ALL": "C.UTF-8",
            "ALPHA_PARTITIONED_DEVICE_CONFIG": "/etc/lane.json",
            "BUILDKITE_BRANCH": "main",
            "BUILDKITE_AGENT_ACCESS_TOKEN": "bk-secret-token",
            "SLACK_WEBHOOK": "https://hooks.example/T0/B0/xyz",
            "PYPI_PW": "pypi-pass-123",
            "DATABASE_URL": "postgres://ci:pw@db/app",
            "OLDPWD": "/home/ci",
            "MINE": "mine-value",
            "EMPTY": "",
        }
        got = recorded_env(env, ["MINE"])
        assert set(env) == set(got)
        assert {
            "PATH": "/usr/bin",
            "GITHUB_SHA": "abc123",
            "LC_ALL": "C.UTF-8",
            "ALPHA_PARTITIONED_DEVICE_CONFIG": "/etc/lane.json",
            "BUILDKITE_BRANCH": "main",
            "MINE": "mine-value",
            "EMPTY": "",
        } == {k: v for k, v in got.items() if v != NOT_RECORDED}

    def test_prefix_never_allows_a_secret_looking_name(self) -> None:
        """ALPHA_*, AOS_*, BUILDKITE_* are allowed, but not a name that looks secret."""
        assert is_allowed("ALPHA_COORDINATE_DEVICE_CONFIG")
        assert is_allowed("AOS_STREAM")
        assert not is_allowed("ALPHA_API_TOKEN")
        assert not is_allowed("BUILDKITE_AGENT_ACCESS_TOKEN")
        assert not is_allowed("GITHUB_TOKEN")

    def test_recorded_stream_open_env(self, tmp_path: Path) -> None:
        """In a real recording, DATABASE_URL, PYPI_PW, SLACK_WEBHOOK are not recorded; a lane config path is;
        an --env value is recorded masked."""
        env = {
            "DATABASE_URL": "postgres://ci:db-pass-0451@db/app",
            "PYPI_PW": "pypi-pw-7731",
            "SLACK_WEBHOOK": "https://hooks.slack.example/services/T0/B0/hook-secret-88",
            "ALPHA_PARTITIONED_DEVICE_CONFIG": "/etc/alpha/lane.json",
            "DEPLOY_TARGET": "prod-eu",
            "REPO_URL": "https://bot:repo-pass-0099@git.example/r.git",
        }
        proc, path = record(tmp_path, ["true"], "--env", "DEPLOY_TARGET", "--env", "REPO_URL", env=env)
        assert 0 == proc.returncode, proc.stderr
        got = events(path)[0].attrs["env"]
        assert NOT_RECORDED == got["DATABASE_URL"] == got["PYPI_PW"] == got["SLACK_WEBHOOK"]
        assert "/etc/alpha/lane.json" == got["ALPHA_PARTITIONED_DEVICE_CONFIG"]
        assert "prod-eu" == got["DEPLOY_TARGET"]
        assert "https://[MASKED]@git.example/r.git" == got["REPO_URL"]
        for secret in ("db-pass-0451", "pypi-pw-7731", "hook-secret-88", "repo-pass-0099"):
            assert secret.encode() not in _blob(events(path))

    def test_printed_env_secrets_are_masked(self, tmp_path: Path) -> None:
        """Values of DATABASE_URL (its password), PYPI_PW and SLACK_WEBHOOK printed by the command are masked."""
        env = {
            "DATABASE_URL": "postgres://ci:db-pass-0451@db/app",
            "PYPI_PW": "pypi-pw-7731",
            "SLACK_WEBHOOK": "https://hooks.slack.example/services/T0/B0/hook-secret-88",
        }
        script = 'echo "$DATABASE_URL"; echo "pw=db-pass-0451"; echo "$PYPI_PW"; echo "$SLACK_WEBHOOK" >&2'
        proc, path = record(tmp_path, ["sh", "-c", script], env=env)
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        assert b"postgres://[MASKED]@db/app\npw=[MASKED]\n[MASKED]\n" == output(evs, "stdout")
        assert b"[MASKED]\n" == output(evs, "stderr")
        assert output(evs, "stdout") == proc.stdout


class TestDocs:
    DOC = DOCS / "SECRETS.md"

    def test_allow_list_is_documented_exactly(self) -> None:
        """docs/SECRETS.md's allow-list table names exactly the names and prefixes the recorder allows."""
        text = self.DOC.read_text(encoding="utf-8")
        table = text[text.index("The allow-list") : text.index("A prefix never")]
        names = set(re.findall(r"`([A-Z0-9_]+\*?)`", table))
        assert ALLOWED_NAMES == {n for n in names if not n.endswith("*")}
        assert set(ALLOWED_PREFIXES) == {n[:-1] for n in names if n.endswith("*")}

    def test_secret_name_rules_are_documented(self) -> None:
        """Every part and word that makes a name look secret is named in docs/SECRETS.md."""
        text = self.DOC.read_text(encoding="utf-8")
        for part in (*SECRET_NAME_PARTS, *SECRET_NAME_WORDS):
            assert f"`{part}`" in text, part


class TestMaskSources:
    def test_mask_env_and_mask_file(self, tmp_path: Path) -> None:
        """--mask-env NAME masks that variable's value; --mask-file masks each line of a file or a pipe."""
        listed = tmp_path / "masks.txt"
        listed.write_bytes(b"file-secret-1\r\n\nfile secret two\n")
        env = {"INNOCENT": "innocent-value-5", "VIA_PIPE": "pipe-secret-3"}
        script = 'echo "$INNOCENT file-secret-1 file secret two pipe-secret-3"'
        proc, path = record(
            tmp_path,
            ["bash", "-c", script],
            "--mask-env",
            "INNOCENT",
            "--mask-file",
            str(listed),
            "--mask-file",
            "/dev/stdin",
            env=env,
            input=b"pipe-secret-3\n",
        )
        assert 0 == proc.returncode, proc.stderr
        assert b"[MASKED] [MASKED] [MASKED] [MASKED]\n" == output(events(path), "stdout") == proc.stdout

    def test_mask_file_keeps_values_out_of_ps(self, tmp_path: Path) -> None:
        """With --mask-file the value is not on the recorder's command line (what `ps` shows); with --mask it is."""
        (tmp_path / "m").write_text("ps-visible-secret\n")
        probe = (
            "import os, sys\n"
            "cmdline = open(f'/proc/{os.getppid()}/cmdline', 'rb').read()\n"
            "sys.exit(1 if b'ps-visible-' + b'secret' in cmdline else 0)\n"  # not itself in the recorder's argv
        )
        proc, _ = record(tmp_path, [sys.executable, "-c", probe], "--mask-file", str(tmp_path / "m"))
        assert 0 == proc.returncode, proc.stderr
        proc, _ = record(tmp_path, [sys.executable, "-c", probe], "--mask", "ps-visible-secret")
        assert 1 == proc.returncode

    def test_unreadable_mask_file_is_a_usage_error_and_nothing_runs(self, tmp_path: Path) -> None:
        """A mask file that cannot be read (missing, a directory) refuses with exit 2 before the command runs."""
        marker = tmp_path / "ran"
        for bad in (str(tmp_path / "missing"), str(tmp_path)):
            proc = alpha(
                "observe", "record", "--out", str(tmp_path / "x.aos"), "--mask-file", bad, "--", "touch", str(marker)
            )
            assert 2 == proc.returncode, proc.stderr
            assert b"--mask-file" in proc.stderr
        assert not marker.exists()
        assert not (tmp_path / "x.aos").exists()

    def test_read_mask_file_refuses_devices(self) -> None:
        """A mask file must be a regular file or a pipe: a device is refused by name."""
        with pytest.raises(ValueError, match="not a regular file or a pipe"):
            read_mask_file("/dev/null")

    def test_options_reach_record_options(self, tmp_path: Path) -> None:
        """--mask-env, --env (repeatable) and --mask-file (its lines, after --mask values) reach RecordOptions."""
        import click
        from click.testing import CliRunner

        from observe.cli.options import options_from_click, recording_options
        from observe.recorder.record import RecordOptions

        seen: dict[str, RecordOptions] = {}

        @click.command()
        @recording_options
        def probe(**kwargs: Any) -> None:
            seen["opts"] = options_from_click(**kwargs)

        (tmp_path / "m").write_text("f1\nf2\n")
        args = ["--mask", "m1", "--mask-file", str(tmp_path / "m"), "--mask-env", "A", "--mask-env", "B"]
        result = CliRunner().invoke(probe, [*args, "--env", "C", "--env", "D"])
        assert 0 == result.exit_code, result.output
        opts = seen["opts"]
        assert (("m1", "f1", "f2"), ("A", "B"), ("C", "D")) == (opts.masks, opts.mask_env, opts.env)

    def test_unset_mask_env_warns_and_records(self, tmp_path: Path) -> None:
        """--mask-env naming an unset variable warns on stderr; the recording goes on."""
        env = child_env({"NOT_SET_ANYWHERE": None})
        proc, path = record(tmp_path, ["true"], "--mask-env", "NOT_SET_ANYWHERE", env=env)
        assert 0 == proc.returncode
        assert b"NOT_SET_ANYWHERE" in proc.stderr
        assert "process.exit" in [e.kind for e in events(path)]

    def test_secrets_for_recording(self) -> None:
        """The starting set holds --mask values, --mask-env values, secret-looking env and URL passwords."""
        s, unset = secrets_for_recording(
            {"A_TOKEN": "token-value-1", "PLAIN": "plain-value", "URL": "https://u:url-pass-1@h/", "X": "x-value-1"},
            masks=["m-value"],
            mask_env=["X", "GONE"],
        )
        assert ["GONE"] == unset
        for value in (b"token-value-1", b"url-pass-1", b"u:url-pass-1", b"m-value", b"x-value-1"):
            assert value in s
        assert b"plain-value" not in s


class TestAddMask:
    def test_stream_and_live_echo_after_add_mask(self, tmp_path: Path) -> None:
        """::add-mask::VALUE (stdout or stderr, in a step too) masks VALUE in the stream and the live echo
        from then on, and the command line itself shows no value."""
        # The values are made at run time: what the recorder saw before the command said so is not masked.
        script = (
            "one=added-one-$((70+7)); two=added-two-$((80+8)); three=added-three-$((90+9)); export two three\n"
            'echo "::add-mask::$one"; echo "use $one"; echo "err $one" >&2\n'
            'echo "  ::add-mask::$two" >&2\n'
            # a step's start drains both pipes first, so the stderr line is honoured before what follows
            'alpha observe step inner -- sh -c \'echo "::add-mask::$three"; echo "$two $three"\'\n'
            'echo "end $two $three"\n'
        )
        proc, path = record(tmp_path, ["bash", "-c", script])
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        for value in (b"added-one-77", b"added-two-88", b"added-three-99"):
            assert value not in _blob(evs)
            assert value not in proc.stdout + proc.stderr
        assert b"::add-mask::[MASKED]\nuse [MASKED]\n" in output(evs, "stdout")
        assert b"end [MASKED] [MASKED]\n" in output(evs, "stdout")
        assert b"  ::add-mask::[MASKED]\n" in proc.stderr


class TestMaskingCannotGarbleEvidence:
    def test_short_add_masks_leave_structure_and_digests(self, tmp_path: Path) -> None:
        """A command masking "name", "pass", "0" or a blank cannot rename attrs, change a status or a digest,
        or mask every space: it can only hide text."""
        (tmp_path / "a.txt").write_text("0\n")
        script = (
            'printf "::add-mask::name\\n::add-mask::pass\\n::add-mask::0\\n::add-mask::   \\n"\n'
            'echo \'{"name": "name-x", "status": "pass", "fields": {"name": "pass"}}\' >> "$AOS_RECEIPTS"\n'
            "echo 'a b c'; alpha observe artifact a.txt\n"
        )
        proc, path = record(tmp_path, ["sh", "-c", script], cwd=tmp_path)
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        receipt = one(evs, "receipt").attrs
        assert {"name": "[MASKED]-x", "status": "pass", "fields": {"[MASKED]": "[MASKED]"}} == receipt
        art = one(evs, "artifact").attrs
        assert hashlib.sha256(b"0\n").hexdigest() == art["sha256"]
        assert ("file", "omitted", True) == (art["kind"], art["content"], art["masked"])
        assert b"a b c\n" in output(evs, "stdout")
        assert {"stream_id", "argv", "env", "labels", "cwd"} <= set(evs[0].attrs)


class TestAfterParsing:
    def test_receipt_fields_with_quotes_backslashes_and_u_escapes(self, tmp_path: Path) -> None:
        """A secret with " and \\ (or written as \\uXXXX escapes) in a receipt is masked after parsing;
        an invalid line holding it escaped is masked too."""
        secret = 'p"a\\ss-w0rd'
        valid = json.dumps({"name": "r", "fields": {"pw": secret, "nested": [{"k": f"x {secret} y"}]}})
        u_valid = '{"name": "u", "fields": {"pw": "' + _u_escaped(secret) + '"}}'
        invalid = '{"name": "bad", "fields": {"pw": "' + _u_escaped(secret) + '"'
        (tmp_path / "lines").write_text("\n".join([valid, u_valid, invalid]) + "\n")
        (tmp_path / "m").write_text(secret + "\n")
        script = 'cat lines >> "$AOS_RECEIPTS"'
        proc, path = record(tmp_path, ["sh", "-c", script], "--mask-file", str(tmp_path / "m"), cwd=tmp_path)
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        receipts = {e.attrs["name"]: e.attrs["fields"] for e in evs if e.kind == "receipt"}
        assert {"pw": "[MASKED]", "nested": [{"k": "x [MASKED] y"}]} == receipts["r"]
        assert {"pw": "[MASKED]"} == receipts["u"]
        bad = one(evs, "receipt.invalid")
        assert b'{"name": "bad", "fields": {"pw": "[MASKED]"' == bad.data
        blob = _blob(evs)
        for form in (secret, json.dumps(secret)[1:-1], _u_escaped(secret)):
            assert form.encode() not in blob, form

    def test_step_names_argv_labels_and_paths(self, tmp_path: Path) -> None:
        """Step names and argv, labels (keys and values), artifact paths and symlink targets are masked."""
        secret = "path-secret-42"
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / f"{secret}.txt").write_text("plain\n")
        (tmp_path / "out" / "link").symlink_to(f"/nowhere/{secret}")
        script = f"alpha observe step 'build {secret}' -- echo {secret}"
        proc, path = record(
            tmp_path,
            ["sh", "-c", script],
            "--mask",
            secret,
            "--label",
            f"who={secret}",
            "--label",
            f"{secret}=v",
            "--artifact",
            "out",
            cwd=tmp_path,
        )
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        assert secret.encode() not in _blob(evs)
        assert {"who": "[MASKED]", "[MASKED]": "v"} == evs[0].attrs["labels"]
        start = one(evs, "step.start")
        assert "build [MASKED]" == start.attrs["name"]
        assert ["echo", "[MASKED]"] == start.attrs["argv"]
        files = {e.attrs["path"]: e.attrs for e in evs if e.kind == "artifact"}
        assert {"out/[MASKED].txt", "out/link"} == set(files)
        assert "/nowhere/[MASKED]" == files["out/link"]["target"]


class TestArtifacts:
    def _secret_file(self, path: Path, secret: bytes, at: int) -> bytes:
        data = bytearray(b"x" * (at + len(secret) + 1000))
        data[at : at + len(secret)] = secret
        path.write_bytes(bytes(data))
        return bytes(data)

    def test_file_holding_a_secret_is_omitted_with_digests(self, tmp_path: Path) -> None:
        """A file whose bytes hold a masked value (even split across the read chunks, or JSON-escaped, in the
        --artifact capture or the mid-run one) is recorded without bytes, masked: true, digests kept."""
        secret = b'chunk-"secret"-77'
        straddling = self._secret_file(tmp_path / "big.bin", secret, artifacts.CHUNK - 5)
        (tmp_path / "escaped.json").write_text(json.dumps({"v": secret.decode()}))
        (tmp_path / "clean.txt").write_text("nothing to hide\n")
        (tmp_path / "mid.txt").write_bytes(b"mid " + secret + b"\n")
        (tmp_path / "m").write_bytes(secret + b"\n")
        proc, path = record(
            tmp_path,
            ["alpha", "observe", "artifact", "mid.txt"],
            "--mask-file",
            "m",
            "--artifact",
            "big.bin",
            "--artifact",
            "escaped.json",
            "--artifact",
            "clean.txt",
            cwd=tmp_path,
        )
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        files = {e.attrs["path"]: e.attrs for e in evs if e.kind == "artifact"}
        chunked = {e.attrs["path"] for e in evs if e.kind == "artifact.chunk"}
        assert {"clean.txt"} == chunked
        for name in ("big.bin", "escaped.json", "mid.txt"):
            attrs = files[name]
            assert ("omitted", True) == (attrs["content"], attrs["masked"]), name
            assert hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() == attrs["sha256"]
        assert hashlib.sha256(straddling).hexdigest() == files["big.bin"]["sha256"]
        assert "masked" not in files["clean.txt"]
        assert secret not in _blob(evs)

    def test_secret_appearing_between_the_two_reads_is_still_masked(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A file that gains a secret after it was scanned has it masked in its chunks and an artifact.error
        saying masked."""
        f = tmp_path / "f"
        f.write_bytes(b"a" * 100)
        real = artifacts._hash

        def hash_then_change(fd: int, scanner: Scanner, stop: Callable[[], bool]) -> tuple[int, str, str]:
            result = real(fd, scanner, stop)
            f.write_bytes(b"a" * 40 + b"late-secret" + b"a" * 49)
            return result

        monkeypatch.setattr(artifacts, "_hash", hash_then_change)
        got: list[tuple[str, dict[str, Any], bytes | None]] = []
        artifacts.capture(
            lambda k, a, d, s: got.append((k, a, d)), ["f"], cwd=str(tmp_path), secrets=SecretSet([b"late-secret"])
        )
        assert ["artifact", "artifact.chunk", "artifact.error"] == [k for k, _, _ in got]
        assert b"a" * 40 + MASK + b"a" * 49 == got[1][2]
        assert got[2][1]["masked"] is True


class TestByteText:
    """A secret inside a value that is not UTF-8 is stored as byte text ({"bytes_b64": ...}): it is
    masked as the bytes it stands for, never hidden from the masker inside its base64."""

    SECRET = "hunter2-byte-text"

    def test_mask_value_sees_inside_byte_text(self) -> None:
        from aos.text import KEY_PREFIX, key_bytes, text_key, text_value, value_bytes
        from observe.secrets.masking import mask_value

        secrets = SecretSet([self.SECRET])
        raw = b"\xff" + self.SECRET.encode() + b"\xfe"
        stored = text_value(raw)
        assert isinstance(stored, dict)
        masked = value_bytes(mask_value(stored, secrets))
        assert masked is not None
        assert self.SECRET.encode() not in masked
        assert MASK in masked
        key = text_key(raw)
        assert key.startswith(KEY_PREFIX)
        assert self.SECRET.encode() not in key_bytes(mask_value(key, secrets))

    def test_recorded_argv_and_step_name(self, tmp_path: Path) -> None:
        """End to end: a --mask value inside a non-UTF-8 argv item and step name reads back masked."""
        import base64
        import subprocess

        from aos.text import key_bytes, value_bytes
        from tests.helpers.run import ALPHA

        out = tmp_path / "b.aos"
        secret = self.SECRET.encode()
        arg = b"\xff" + secret
        script = b'"$ALPHA" observe step "$1" -- true'
        cmd = [os.fsencode(ALPHA), b"observe", b"record", b"--quiet", b"--mask", secret, b"--out", os.fsencode(out)]
        cmd += [b"--", b"sh", b"-c", script, b"sh", arg]
        env = os.environb.copy()
        env[b"ALPHA"] = os.fsencode(ALPHA)
        proc = subprocess.run(cmd, env=env, capture_output=True, timeout=120, check=False)
        assert 0 == proc.returncode, proc.stderr
        evs = events(out)
        argv = one(evs, "process.start").attrs["argv"]
        assert [value_bytes(a) for a in argv][:3] == [b"sh", b"-c", script]
        last = value_bytes(argv[-1])
        assert last is not None
        assert secret not in last
        assert MASK in last
        start = one(evs, "step.start")
        name = value_bytes(start.attrs["name"])
        assert name is not None
        assert secret not in name
        assert start.step is not None
        assert secret not in key_bytes(start.step)
        # and nowhere else, decoded or base64-decoded
        blob = _blob(evs)
        assert secret not in blob
        for found in re.findall(rb'"bytes_b64":"([A-Za-z0-9+/=]+)"', blob):
            assert secret not in base64.b64decode(found)
