"""One flag vocabulary across every command: -o/--out, --key, --sign-key/--sign-key-env, --db; old spellings hidden."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from click.testing import CliRunner

from aos.signing import generate_keypair
from observe.cli.options import VOCABULARY, AliasedOption
from observe.cli.root import main
from tracker.testing import sealed_stream


def gated(path: Path, signer: Any = None) -> Path:
    """A stream of a command that exited 0, sealed with the verdict gate exit-zero really gives."""
    from gates.testing import SyntheticStream

    s = SyntheticStream(gate="exit-zero")
    s.output("stdout", b"hello\n")
    s.exit(0)
    s.add("verdict", s.evaluate("exit-zero").to_attrs())
    s.write(path, signer=signer)
    return path


#: The spellings that were once visible and are hidden aliases now.
OLD = ("--output", "--tracker", "--signing-key", "--journal-key", "--seal-key")


def commands(cmd: click.Command = main, path: tuple[str, ...] = ()) -> Iterator[tuple[str, click.Command]]:
    """Every command and group of ``alpha``, with its words."""
    yield " ".join(path) or "alpha", cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from commands(sub, (*path, name))


def options(cmd: click.Command) -> list[click.Option]:
    return [p for p in cmd.params if isinstance(p, click.Option) and p.name != "help"]


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), env=env)
    return r.exit_code, r.stdout, r.stderr


class TestEveryCommand:
    def test_no_old_spelling_is_visible(self) -> None:
        """No command shows an old spelling in its options (they are hidden aliases)."""
        shown = {
            (name, o) for name, cmd in commands() for p in options(cmd) if not p.hidden for o in p.opts if o in OLD
        }
        assert set() == shown

    def test_the_file_written_is_o_out(self) -> None:
        """Every option whose value is the file a command writes is spelled -o/--out."""
        outs = {name: sorted(p.opts) for name, cmd in commands() for p in options(cmd) if p.name in ("out", "output")}
        assert outs
        assert {name: ["--out", "-o"] for name in outs} == outs

    def test_key_is_always_the_public_key(self) -> None:
        """Every --key takes a public key (PUBKEY), and every option that takes a public key is --key."""
        keys = {(name, p.name, p.metavar) for name, cmd in commands() for p in options(cmd) if "--key" in p.opts}
        assert keys
        assert {(name, "key", "PUBKEY") for name, _, _ in keys} == keys
        public = {
            (name, tuple(p.opts))
            for name, cmd in commands()
            for p in options(cmd)
            if p.metavar in ("PUBKEY", "PUB") and not p.hidden
        }
        assert {(name, ("--key",)) for name, _ in public} == public

    def test_the_private_key_is_sign_key_with_sign_key_env(self) -> None:
        """Every command that signs takes --sign-key FILE and --sign-key-env NAME, and no other private-key option."""
        signing = {name for name, cmd in commands() for p in options(cmd) if "--sign-key" in p.opts}
        with_env = {name for name, cmd in commands() for p in options(cmd) if "--sign-key-env" in p.opts}
        recorders = {"observe record", "observe gate", "observe node", "observe session run"}
        assert recorders | {"observe attest", "observe attach", "tracker"} == signing
        assert signing == with_env

    def test_the_tracker_is_db(self) -> None:
        """The tracker is --db wherever a command names it (tracker and attach)."""
        dbs = {name: tuple(p.opts) for name, cmd in commands() for p in options(cmd) if p.name == "db"}
        assert {"tracker": ("--db",), "observe attach": ("--db",)} == dbs

    def test_every_spelling_of_the_vocabulary_is_used(self) -> None:
        """Each word of the vocabulary names at least one option, so the list in options.py is the one in use."""
        used = {o for _, cmd in commands() for p in options(cmd) for o in p.opts}
        assert set(VOCABULARY) <= used

    def test_aliases_are_hidden_from_help(self) -> None:
        """--help of a command with aliases names none of them."""
        for name, cmd in commands():
            aliases = [a for p in options(cmd) if isinstance(p, AliasedOption) for a in p.aliases]
            aliases += [o for p in options(cmd) if p.hidden for o in p.opts]
            if aliases:
                words = [] if name == "alpha" else name.split()
                text = run(*words, "--help")[1]
                assert [] == [a for a in aliases if a in text], name


class TestOldSpellingsStillWork:
    def test_report_output(self, stream: Path, tmp_path: Path) -> None:
        """report --output FILE writes the page, as -o does."""
        assert 0 == run("observe", "report", str(stream), "--output", str(tmp_path / "r.html"))[0]
        assert (tmp_path / "r.html").is_file()

    def test_export_output(self, stream: Path, tmp_path: Path) -> None:
        """export --output FILE writes the export."""
        assert 0 == run("observe", "export", str(stream), "--format", "otlp", "--output", str(tmp_path / "t.json"))[0]
        assert (tmp_path / "t.json").is_file()

    def test_attest_old_key_and_seal_key(self, tmp_path: Path) -> None:
        """attest --key PRIVATE --seal-key PUB --output FILE signs with the private key and checks the seal."""
        from aos.signing import load_signer

        generate_keypair(tmp_path / "attest")
        generate_keypair(tmp_path / "seal")
        stream = tmp_path / "s.aos"
        gated(stream, signer=load_signer(tmp_path / "seal.key"))
        out = tmp_path / "e.json"
        args = ["--key", str(tmp_path / "attest.key"), "--seal-key", str(tmp_path / "seal.pub"), "--output", str(out)]
        code, _, err = run("observe", "attest", str(stream), "--attester-id", "https://ci.example/a", *args)
        assert 0 == code, err
        import json

        envelope = json.loads(out.read_text())
        assert load_signer(tmp_path / "attest.key").key_id == envelope["signatures"][0]["keyid"]

    def test_attest_new_spelling(self, tmp_path: Path) -> None:
        """attest --sign-key PRIVATE --key PUB -o FILE signs, and --key refuses a seal by another key."""
        from aos.signing import load_signer

        generate_keypair(tmp_path / "attest")
        generate_keypair(tmp_path / "seal")
        stream = tmp_path / "s.aos"
        gated(stream, signer=load_signer(tmp_path / "seal.key"))
        code, _, err = run(
            "observe", "attest", str(stream), "--sign-key", str(tmp_path / "attest.key"),
            "--key", str(tmp_path / "seal.pub"), "-o", str(tmp_path / "e.json"), "--attester-id", "https://ci.example/a",
        )  # fmt: skip
        assert 0 == code, err
        code, _, err = run(
            "observe", "attest", str(stream), "--key", str(tmp_path / "attest.pub"), "-o", str(tmp_path / "f.json"),
            "--attester-id", "https://ci.example/a",
        )  # fmt: skip
        assert (1, True) == (code, err.startswith("refused: stream-signature:"))

    def test_attest_sign_key_env(self, tmp_path: Path) -> None:
        """attest --sign-key-env NAME signs with the PEM in that variable."""
        from aos.signing import load_signer

        stream = gated(tmp_path / "s.aos")
        generate_keypair(tmp_path / "attest")
        env = {"ATTEST_KEY": (tmp_path / "attest.key").read_text(), "ALPHA_ATTESTER_ID": "https://ci.example/a"}
        out = tmp_path / "e.json"
        code, _, err = run("observe", "attest", str(stream), "--sign-key-env", "ATTEST_KEY", "-o", str(out), env=env)
        assert 0 == code, err
        import json

        assert load_signer(tmp_path / "attest.key").key_id == json.loads(out.read_text())["signatures"][0]["keyid"]

    def test_tracker_attach_and_audit_old_spellings(self, tmp_path: Path) -> None:
        """tracker --signing-key, attach --tracker/--signing-key and audit --journal-key still work."""
        generate_keypair(tmp_path / "t")
        db, key, pub = str(tmp_path / "p.sqlite3"), str(tmp_path / "t.key"), str(tmp_path / "t.pub")
        assert 0 == run("tracker", "--db", db, "--signing-key", key, "init")[0]
        code, run_id, _ = run(
            "tracker", "--db", db, "--signing-key", key, "run", "start", "--lane", "distributed-device"
        )
        assert 0 == code
        stream = tmp_path / "s.aos"
        sealed_stream(stream)  # recorded after the run started
        code, _, err = run(
            "observe", "attach", str(stream), "--tracker", db, "--signing-key", key, "--run", run_id.strip()
        )
        assert 0 == code, err
        code, out, err = run("tracker", "--db", db, "audit", "--journal-key", pub)
        assert 0 == code, out + err
        assert 0 == run("tracker", "--db", db, "audit", "--key", pub)[0]

    def test_gate_and_record_short_out(self, tmp_path: Path) -> None:
        """record and gate take -o for --out."""
        import subprocess

        for words in (["record"], ["gate", "exit-zero"]):
            out = tmp_path / f"{words[0]}.aos"
            argv = ["alpha", "observe", *words, "--quiet", "-o", str(out), "--", "true"]
            assert 0 == subprocess.run(argv, capture_output=True, check=False).returncode
            assert out.is_file()
