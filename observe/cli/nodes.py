"""``alpha observe nodes``: the remote nodes of a lane config, checked before a recording (observe.devices.check)."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator

import click

from observe.cli.options import Exit, example, option, reports_refusals

__all__ = ["COMMANDS", "nodes_check_command", "nodes_group"]


@example("alpha observe nodes check config.json --observer-key-env OBSERVER_KEY")
@click.group("nodes")
def nodes_group() -> None:
    """The remote nodes a lane config names, as the recorder reaches them."""


@contextlib.contextmanager
def _key_file(path: str | None, env_name: str | None) -> Iterator[str | None]:
    """The observer's private key as a file: ``--observer-key FILE`` as is, ``--observer-key-env NAME`` in a
    private temporary file removed at the end (this command records nothing and runs no other command)."""
    if path is not None and env_name is not None:
        raise click.UsageError("give the observer's key once: --observer-key FILE or --observer-key-env NAME")
    if env_name is None:
        yield path
        return
    value = os.environ.get(env_name, "")
    if not value.strip():
        raise click.UsageError(f"--observer-key-env {env_name}: the variable is not set or empty")
    folder = tempfile.mkdtemp(prefix="alpha-nodes-")
    key = os.path.join(folder, "observer-key")
    try:
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(value if value.endswith("\n") else value + "\n")
        yield key
    finally:
        with contextlib.suppress(OSError):
            os.unlink(key)
        with contextlib.suppress(OSError):
            os.rmdir(folder)


@example(
    "alpha observe nodes check config.json --observer-key-env OBSERVER_KEY",
    "ALPHA_COORDINATE_DEVICE_CONFIG=config.json alpha observe nodes check --observer-key ~/.ssh/observer",
)
@nodes_group.command("check")
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@option(
    "--observer-key-env",
    "observer_key_env",
    metavar="NAME",
    default=None,
    help="The observer account's private key, from environment variable NAME (as record and gate take it).",
)
@option(
    "--observer-key",
    "observer_key",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    default=None,
    help="The observer account's private key, from a file.",
)
@reports_refusals()
def nodes_check_command(config: str | None, observer_key_env: str | None, observer_key: str | None) -> None:
    """Reach every node CONFIG names as a recording would, and say what would keep it from observing them.

    CONFIG defaults to the device configs the environment names (ALPHA_*_DEVICE_CONFIG).
    For each node: reachable, its host key verified (with the ssh-keyscan line to add an
    unknown one), the observer run once (its interpreter, NVML and driver, the GPUs and the
    minors the config binds), the lane account and its uid (its own login and key), and
    what the lane needs there (python3, torch with CUDA, remote_root writable, free disk).
    Nothing is recorded. Exit 0 every node would be observed, 1 a problem (each named) or
    refused (nodes-config), 2 usage.
    """
    from observe.devices.check import ConfigUnusable, check_config, default_config
    from observe.refusals import NodesConfig

    if config is not None:
        configs = [(config, config)]
    else:
        configs = default_config(os.environ)
        if not configs:
            raise NodesConfig("no CONFIG given and no ALPHA_*_DEVICE_CONFIG variable set: name the lane config")
    problems: list[str] = []
    with _key_file(observer_key, observer_key_env) as key:
        for name, path in configs:
            try:
                report = check_config(name, path, os.environ, observer_key=key)
            except ConfigUnusable as exc:
                raise NodesConfig(str(exc)) from None
            _print(report)
            problems += report.problems
    if problems:
        click.echo(
            f"\n{len(problems)} problem{'s' if len(problems) != 1 else ''}; a recording would not observe every node:"
        )
        for line in problems:
            click.echo(f"  - {line}")
        sys.exit(Exit.FAIL)
    click.echo("\nevery node would be observed; nothing was recorded")


def _print(report: object) -> None:
    from observe.devices.check import Report

    assert isinstance(report, Report)
    click.echo(f"config {report.config}")
    for line in report.config_problems:
        click.echo(f"  PROBLEM  {line}")
    for node in report.nodes:
        click.echo(f"\nnode {node.name}")
        width = max((len(r.what) for r in node.rows), default=0)
        for row in node.rows:
            mark = "ok     " if row.problem is None else "PROBLEM"
            line = f"  {mark}  {row.what.ljust(width)}  {row.found}"
            click.echo(line if row.problem is None else f"{line}\n  {' ' * 7}  {' ' * width}  -> {row.problem}")


COMMANDS: list[click.Command] = [nodes_group]
