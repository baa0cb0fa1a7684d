"""Secrets: redacted in stream.open, masked in captured output even when split across reads."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from recorder_util import events, output, record

from observe.masking import MASK, Masker, env_secrets, is_secret_name, mask_bytes, redact_env


def _stream(masker: Masker, chunks: list[bytes]) -> bytes:
    return b"".join(masker.feed(c) for c in chunks) + masker.finish()


class TestNames:
    def test_secret_looking_names(self) -> None:
        """Names containing TOKEN, SECRET, PASSWORD, KEY, CREDENTIAL, AUTH, ... look secret; others do not."""
        for name in (
            "GITHUB_TOKEN",
            "aws_secret_access_key",
            "DB_PASSWORD",
            "PASSWD",
            "API_KEY",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "AUTH_HEADER",
            "PRIVATE_PEM",
            "COOKIE_JAR",
            "SESSION_ID",
        ):
            assert is_secret_name(name), name
        for name in ("PATH", "HOME", "LANG", "PWD", "USER"):
            assert not is_secret_name(name), name

    def test_redact_env(self) -> None:
        """Secret-looking values become [REDACTED]; the rest are kept."""
        assert {"A_TOKEN": "[REDACTED]", "HOME": "/root", "EMPTY_KEY": ""} == redact_env(
            {"A_TOKEN": "abc", "HOME": "/root", "EMPTY_KEY": ""}
        )

    def test_short_and_trivial_values_are_not_masked_in_output(self) -> None:
        """Flags like 1 or true in secret-looking variables are redacted, but not masked everywhere."""
        assert [b"long-enough-secret"] == env_secrets({"X_KEY": "1", "Y_AUTH": "true", "Z_TOKEN": "long-enough-secret"})


class TestMasker:
    def test_split_at_every_position(self) -> None:
        """A secret split across two chunks at any byte is still masked, and nothing else changes."""
        secret = b"hunter2-secret"
        data = b"before " + secret + b" middle " + secret + b" after"
        for cut in range(len(data) + 1):
            out = _stream(Masker([secret]), [data[:cut], data[cut:]])
            assert b"before " + MASK + b" middle " + MASK + b" after" == out, cut

    def test_held_back_only_while_it_could_be_a_secret(self) -> None:
        """A chunk ending in a secret's prefix holds only that prefix; an unrelated chunk passes whole."""
        m = Masker([b"abcdef"])
        assert b"xyz " == m.feed(b"xyz abc")
        assert b"abcxyz" == m.feed(b"xyz")
        assert b"plain" == m.feed(b"plain")
        assert b"" == m.finish()

    def test_no_secrets_is_identity(self) -> None:
        """Without secrets the chunk is returned as is."""
        chunk = b"\x00\xff data"
        assert chunk is Masker([]).feed(chunk)

    @given(
        st.binary(max_size=200),
        st.lists(st.integers(min_value=0, max_value=260), max_size=6),
        st.lists(st.integers(min_value=0, max_value=200), max_size=3),
    )
    def test_chunking_never_changes_the_result(self, base: bytes, cuts: list[int], inserts: list[int]) -> None:
        """However the bytes are chunked, streaming masking equals masking the whole, and no secret survives."""
        secret = b"s3cr3t!"
        data = base
        for pos in sorted(inserts, reverse=True):
            data = data[:pos] + secret + data[pos:]
        points = sorted({min(c, len(data)) for c in cuts})
        chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
        out = _stream(Masker([secret]), chunks)
        assert mask_bytes(data, [secret]) == out
        assert secret not in out


class TestEndToEnd:
    def test_secrets_split_across_reads_never_reach_stream_or_echo(self, tmp_path: Path) -> None:
        """Env secrets and --mask values are masked in stdout, stderr, argv and env, even when written in halves."""
        token = "ghp_0123456789abcdef"
        extra = "pa55-w0rd-extra"
        script = (
            "import os, sys, time\n"
            "t = os.environ['MY_TOKEN'].encode(); x = sys.argv[1].encode()\n"
            "for half in (t[:7], t[7:] + b' and ' + x[:3], x[3:] + b'\\n'):\n"
            "    sys.stdout.buffer.write(half); sys.stdout.flush(); time.sleep(0.15)\n"
            "sys.stderr.buffer.write(t + b'\\n')\n"
        )
        proc, path = record(tmp_path, [sys.executable, "-c", script, extra], "--mask", extra, env={"MY_TOKEN": token})
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        assert b"[MASKED] and [MASKED]\n" == output(evs, "stdout")
        assert b"[MASKED]\n" == output(evs, "stderr")
        assert len([e for e in evs if e.kind == "stdout"]) >= 2  # it really was split across reads
        for e in evs:
            blob = e.attrs_json.encode() + (e.data or b"")
            assert token.encode() not in blob, e.kind
            assert extra.encode() not in blob, e.kind
        assert "[REDACTED]" == evs[0].attrs["env"]["MY_TOKEN"]
        assert b"[MASKED] and [MASKED]\n" == proc.stdout
        assert token.encode() not in proc.stderr
