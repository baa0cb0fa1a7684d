"""Masking, as a library: secrets, URL credentials and ::add-mask:: lines, in chunks and whole values."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from observe.secrets.masking import (
    MASK,
    MEMMEM_MIN,
    Masker,
    Scanner,
    SecretSet,
    env_secrets,
    find,
    is_secret_name,
    mask_attrs,
    mask_bytes,
    mask_json_bytes,
    mask_text,
    mask_value,
    url_credentials,
)
from tests.helpers.recorder import events, output, record


def _stream(masker: Masker, chunks: list[bytes]) -> bytes:
    return b"".join(masker.feed(c) for c in chunks) + masker.finish()


def _every_split(data: bytes, secrets: list[bytes]) -> set[bytes]:
    """What a fresh masker makes of ``data`` cut in two at every position."""
    return {_stream(Masker(SecretSet(secrets)), [data[:cut], data[cut:]]) for cut in range(len(data) + 1)}


class TestNames:
    def test_secret_looking_names(self) -> None:
        """Names containing TOKEN, SECRET, PASSWORD, KEY, WEBHOOK, ... or the words PW, PASS, DSN look secret."""
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
            "SLACK_WEBHOOK",
            "PYPI_PW",
            "DB_PASS",
            "SENTRY_DSN",
        ):
            assert is_secret_name(name), name
        for name in ("PATH", "HOME", "LANG", "PWD", "OLDPWD", "USER", "BYPASS_CACHE", "PASSTHROUGH", "DATABASE_URL"):
            assert not is_secret_name(name), name

    def test_env_secrets(self) -> None:
        """Long values of secret-looking names, and passwords in URLs of any variable, are masked everywhere."""
        got = env_secrets(
            {
                "X_KEY": "1",
                "Y_AUTH": "true",
                "Z_TOKEN": "long-enough-secret",
                "DATABASE_URL": "postgres://ci:pa%40ssword@db/app",
                "SHORT_URL": "https://u:pw@host/",
            }
        )
        assert b"long-enough-secret" in got
        assert {b"pa%40ssword", b"pa@ssword", b"ci:pa%40ssword", b"ci:pa@ssword"} <= set(got)
        assert not {b"1", b"true", b"pw", b"u:pw"} & set(got)


class TestSecretSet:
    def test_json_escaped_forms(self) -> None:
        """A value is masked as written and in every form JSON gives it inside a string."""
        secret = 'q"uo\\te/é☃'
        s = SecretSet([secret])
        for form in (
            secret,
            json.dumps(secret)[1:-1],
            json.dumps(secret, ensure_ascii=False)[1:-1],
            json.dumps(secret)[1:-1].replace("/", "\\/"),
            json.dumps(secret)[1:-1].replace("\\u00e9", "\\u00E9"),
        ):
            data = f"a {form} b".encode()
            assert b"a " + MASK + b" b" == mask_bytes(data, s), form

    def test_grows_and_is_shared(self) -> None:
        """A value added later is masked by a masker made before it."""
        s = SecretSet()
        m = Masker(s)
        assert b"late-value\n" == m.feed(b"late-value\n")
        assert s.add("late-value")
        assert not s.add("late-value")
        assert MASK + b"\n" == m.feed(b"late-value\n")


class TestMasker:
    def test_a_flood_is_masked_like_a_trickle(self) -> None:
        """Chunks long enough to be scanned by memmem (a command flooding its output) hide an
        ``::add-mask::`` line and a secret deep inside: both are masked, as in small chunks."""
        filler = b"log line with a : colon and :: pairs\n" * (2 * MEMMEM_MIN // 38)
        data = filler + b"::add-mask::flood-secret-1\n" + filler + b"x flood-secret-1 y hunter2-env z\n" + filler
        big = Masker(SecretSet([b"hunter2-env"]), commands=True)
        out = big.feed(data) + big.finish()
        small = Masker(SecretSet([b"hunter2-env"]), commands=True)
        trickle = b"".join(small.feed(data[i : i + 4096]) for i in range(0, len(data), 4096)) + small.finish()
        assert out == trickle
        assert b"flood-secret-1" not in out
        assert b"hunter2-env" not in out
        assert b"x " + MASK + b" y " + MASK + b" z\n" in out

    def test_split_at_every_position(self) -> None:
        """A secret split across two chunks at any byte is still masked, and nothing else changes."""
        secret = b"hunter2-secret"
        data = b"before " + secret + b" middle " + secret + b" after"
        assert {b"before " + MASK + b" middle " + MASK + b" after"} == _every_split(data, [secret])

    def test_held_back_only_while_it_could_be_a_secret(self) -> None:
        """A chunk ending in a secret's prefix holds only that prefix; an unrelated chunk passes whole."""
        m = Masker([b"abcdef"])
        assert b"xyz " == m.feed(b"xyz abc")
        assert b"abcxyz" == m.feed(b"xyz")
        assert b"plain" == m.feed(b"plain")
        assert b"" == m.finish()

    def test_no_secrets_is_identity(self) -> None:
        """Without secrets, URLs or ::add-mask:: the chunk is returned as is, nothing held."""
        chunk = b"\x00\xff data: https://example.com/a@b\n"
        assert chunk is Masker([]).feed(chunk)

    def test_prompt_is_not_held(self) -> None:
        """Output ending in ':' mid-line (a prompt) goes out at once: only a line's start can begin ::add-mask::."""
        m = Masker([])
        assert b"Password:" == m.feed(b"Password:")
        assert b"\n" == m.feed(b"\n:")  # a ':' at a line's start might be one
        assert b":x\n" == m.feed(b"x\n")

    def test_overlapping_secrets_are_both_masked(self) -> None:
        """Two secrets that overlap are masked as one span, so neither shows."""
        assert {b"<" + MASK + b">"} == _every_split(b"<abcdxy>", [b"abcd", b"bcdxy"])

    @given(
        st.binary(max_size=200),
        st.lists(st.integers(min_value=0, max_value=300), max_size=6),
        st.lists(st.tuples(st.integers(min_value=0, max_value=200), st.sampled_from(range(5))), max_size=4),
    )
    def test_chunking_never_changes_the_result(
        self, base: bytes, cuts: list[int], inserts: list[tuple[int, int]]
    ) -> None:
        """However the bytes are chunked, streaming masking equals masking them in one piece, and no secret,
        URL password or ::add-mask:: value survives."""
        pieces = [
            b"s3cr3t!",
            b"\nsql://ci:Pa55w0rd-x@db/app\n",
            b"\n::add-mask::added-V4lue\r\nthen added-V4lue again\n",
            b'"s3cr3t!"',
            b"\n  ::add-mask::another-0ne\n",
        ]
        data = base
        for pos, which in sorted(inserts, reverse=True):  # into base only: a piece is never cut by another
            pos = min(pos, len(base))
            data = data[:pos] + pieces[which] + data[pos:]
        points = sorted({min(c, len(data)) for c in cuts})
        chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
        out = _stream(Masker(SecretSet([b"s3cr3t!"])), chunks)
        assert _stream(Masker(SecretSet([b"s3cr3t!"])), [data]) == out
        for secret in (b"s3cr3t!", b"Pa55w0rd-x", b"added-V4lue", b"another-0ne"):
            assert secret not in out


class TestAddMask:
    def test_value_is_masked_from_then_on_and_in_its_own_line(self) -> None:
        """::add-mask::VALUE masks VALUE in what follows, on any stream sharing the set, and the line shows no value."""
        s = SecretSet()
        out, err = Masker(s), Masker(s)
        assert b"::add-mask::" + MASK + b"\n" == out.feed(b"::add-mask::tok-98765\n")
        assert b"got " + MASK + b"\n" == err.feed(b"got tok-98765\n")
        assert b"again " + MASK == out.feed(b"again tok-98765") + out.finish()

    def test_split_anywhere(self) -> None:
        """The command line, split across reads at any byte, is honoured, and its value never shows."""
        data = b"x\n   ::add-mask::v4lue-one\r\nuse v4lue-one\n"
        assert {b"x\n   ::add-mask::" + MASK + b"\r\nuse " + MASK + b"\n"} == _every_split(data, [])

    def test_only_at_a_line_start(self) -> None:
        """A mention inside a line is not a command (GitHub's rule), so nothing is added."""
        s = SecretSet()
        assert (
            b"echo ::add-mask::abc\n"
            == mask_bytes(b"echo ::add-mask::abc\n", s)
            == _stream(Masker(s), [b"echo ::add-mask::abc\n"])
        )
        assert 0 == len(s)

    def test_github_escapes_and_unterminated_last_line(self) -> None:
        """%0A-escaped values are added unescaped too; a last line without a newline still counts."""
        s = SecretSet()
        assert b"::add-mask::" + MASK == _stream(Masker(s), [b"::add-mask::two%0Alines"])
        assert b"two\nlines" in s


class TestUrls:
    def test_password_and_pair_are_masked_and_remembered(self) -> None:
        """scheme://user:password@ has its userinfo masked in place; the password is masked later on its own."""
        s = SecretSet()
        m = Masker(s)
        assert b"db postgres://" + MASK + b"@db/app\n" == m.feed(b"db postgres://ci:hunter22@db/app\n")
        assert b"pw " + MASK + b"\n" == m.feed(b"pw hunter22\n")

    def test_split_anywhere(self) -> None:
        """A URL split across reads at any byte still has its userinfo masked."""
        data = b"clone https://x-access-token:ghs_abcdef123@github.com/o/r\n"
        assert {b"clone https://" + MASK + b"@github.com/o/r\n"} == _every_split(data, [])

    def test_not_userinfo(self) -> None:
        """An @ after the authority ended, or a short user without password, is left alone."""
        for text in (b"https://example.com/a@b", b"ssh://git@github.com/x", b"mailto:me@example.com"):
            assert text == mask_bytes(text, [])
        assert [] == url_credentials(b"ssh://git@github.com/x")
        assert b"https://" + MASK + b"@h" == mask_bytes(b"https://ghp_0123456789abcdefXYZ@h", [])


class TestWholeValues:
    def test_mask_value_keys_and_depth(self) -> None:
        """Every string and key of a nested value is masked, at any depth, without recursion."""
        deep: object = "tok-0001"
        for _ in range(5000):
            deep = [deep]
        got = mask_value({"tok-0001": {"a": ["x tok-0001 y", 3, None, True]}, "deep": deep}, [b"tok-0001"])
        assert {"[MASKED]": {"a": ["x [MASKED] y", 3, None, True]}} == {k: v for k, v in got.items() if k != "deep"}
        inner = got["deep"]
        for _ in range(5000):
            inner = inner[0]
        assert "[MASKED]" == inner

    def test_mask_attrs_keeps_shapes_not_names(self) -> None:
        """Digests, enums and signal names are kept when they have their shape (a mask of "a" or "pass" cannot
        garble them); the same names holding anything else are masked; only free-form keys are masked."""
        s = SecretSet(["a", "pass", "SIGTERM-tok"])
        digest = "ab" * 32
        got = mask_attrs(
            {
                "sha256": digest,
                "status": "pass",
                "signal": "SIGTERM-tok",
                "kind": "file",
                "name": "a pass",
                "fields": {"pass": "x"},
                "rusage": {"pass": 1},
            },
            s,
        )
        assert {
            "sha256": digest,
            "status": "pass",
            "signal": "[MASKED]",
            "kind": "file",
            "name": "[MASKED] [MASKED]",
            "fields": {"[MASKED]": "x"},
            "rusage": {"pass": 1},
        } == got

    def test_mask_text_keeps_undecodable_bytes(self) -> None:
        """Text holding surrogate-escaped bytes is masked and keeps them."""
        text = b"\xff tok-0001".decode("utf-8", "surrogateescape")
        assert b"\xff [MASKED]" == mask_text(text, [b"tok-0001"]).encode("utf-8", "surrogateescape")

    def test_json_literals_with_any_escapes(self) -> None:
        """In a raw line that did not parse, a string literal that decodes to a secret is masked, however escaped."""
        line = b'{"pw": "p\\u0061ss\\"w\\\\rd", "x": "ok", "open": "p\\u0061ss\\"w\\\\rd tail'
        got = mask_json_bytes(line, [b'pass"w\\rd'])
        assert b'{"pw": "[MASKED]", "x": "ok", "open": "[MASKED]' == got

    def test_json_literal_scan_is_linear(self) -> None:
        """Many escapes and quotes without an end are scanned once (no quadratic blow-up)."""
        line = b'"' + b'\\"' * 200_000
        assert line == mask_json_bytes(line, [b"zzzzzz"])


class TestScanner:
    def test_split_across_chunks(self) -> None:
        """A secret, an escaped form of it, or URL credentials split across any two chunks are found."""
        for data in (b"....tok-0001....", b'.."tok-0001\\"x"..', b"...https://u:secretpw@h/..."):
            for cut in range(len(data) + 1):
                sc = Scanner(SecretSet([b"tok-0001"]))
                sc.feed(data[:cut])
                sc.feed(data[cut:])
                assert sc.found, (data, cut)
        sc = Scanner(SecretSet([b"tok-0001"]))
        sc.feed(b"nothing here ssh://git@github.com/x")
        assert not sc.found


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
        assert "[NOT RECORDED]" == evs[0].attrs["env"]["MY_TOKEN"]
        assert b"[MASKED] and [MASKED]\n" == proc.stdout
        assert token.encode() not in proc.stderr


class TestFind:
    """``masking.find`` (libc memmem for long scans, which leaves the GIL) is ``bytes.find``, exactly."""

    @given(
        unit=st.binary(min_size=1, max_size=64),
        repeat=st.integers(min_value=1, max_value=3000),
        needle=st.binary(min_size=1, max_size=12),
        start=st.integers(min_value=-5, max_value=200_000),
    )
    @settings(max_examples=200, deadline=None)
    def test_it_is_bytes_find(self, unit: bytes, repeat: int, needle: bytes, start: int) -> None:
        data = unit * repeat + needle + unit
        assert data.find(needle, start) == find(data, needle, start)

    def test_long_scans_use_memmem(self) -> None:
        data = b"a" * (MEMMEM_MIN * 2) + b"::add-mask::x\n"
        assert len(data) - 14 == find(data, b"::add-mask::")
        assert -1 == find(data, b"::add-mask::", len(data) - 13)
        assert -1 == find(data, b"absent")
