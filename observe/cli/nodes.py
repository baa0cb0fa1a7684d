"""``alpha observe nodes``: the remote nodes of a lane config, checked before a recording (observe.devices.check)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from observe.cli.options import Exit, example, observer_key_options, reports_refusals

if TYPE_CHECKING:
    from observe.devices.remote import ObserverKey

__all__ = ["COMMANDS", "nodes_check_command", "nodes_group"]


@example("alpha observe nodes check config.json --observer-key-env OBSERVER_KEY")
@click.group("nodes")
def nodes_group() -> None:
    """The remote nodes a lane config names, as the recorder reaches them."""


def _observer_key(path: Path | None, env_name: str | None) -> ObserverKey | None:
    """The observer's key as ``record`` and ``gate`` take it (``env``: from the variable; ``file``: the file)."""
    from observe.devices.remote import ObserverKey

    if path is not None and env_name is not None:
        raise click.UsageError("give the observer key once: --observer-key-env NAME or --observer-key FILE")
    if env_name is not None:
        value = os.environ.get(env_name, "")
        if not value.strip():
            raise click.BadParameter(f"{env_name}: the variable is not set or empty", param_hint="--observer-key-env")
        return ObserverKey("env", f"${env_name}", value)
    if path is not None:
        return ObserverKey("file", str(path), path.read_text(encoding="utf-8", errors="surrogateescape"))
    return None


@example(
    "ALPHA_COORDINATE_DEVICE_CONFIG=config.json alpha observe nodes check --observer-key-env OBSERVER_KEY",
    "alpha observe nodes check config.json --observer-key-env OBSERVER_KEY",
)
@nodes_group.command("check")
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@observer_key_options
@reports_refusals()
def nodes_check_command(config: str | None, observer_key_env: str | None, observer_key: Path | None) -> None:
    """Reach every node CONFIG names as a recording would, and say what would keep it from observing them.

    CONFIG defaults to the device configs the environment names (ALPHA_*_DEVICE_CONFIG).
    For each node: reachable, its host key verified (with the ssh-keyscan line to add an
    unknown one), the observer run once as the observer account (its login and key, its
    interpreter, the lane account and its uid, other SSH sessions, NVML and driver, the GPUs
    and the minors the config binds), then, logged in as the lane with its own key, what the
    lane needs there (python3, torch with CUDA, remote_root writable, free disk). Nothing is
    recorded (docs/NODES.md). Exit 0 every node would be observed, 1 a problem (each named)
    or refused (nodes-config; minor-bound-twice: one GPU of a host bound to two roles), 2 usage.
    """
    from observe.devices.check import ConfigUnusable, check_config, default_config
    from observe.devices.lane_config import MinorBoundTwice as MinorTwice
    from observe.refusals import MinorBoundTwice, NodesConfig

    if config is not None:
        configs = [(config, config)]
    else:
        configs = default_config(os.environ)
        if not configs:
            raise NodesConfig("no CONFIG given and no ALPHA_*_DEVICE_CONFIG variable set: name the lane config")
    problems: list[str] = []
    key = _observer_key(observer_key, observer_key_env)
    for name, path in configs:
        try:
            report = check_config(name, path, os.environ, observer_key=key)
        except ConfigUnusable as exc:
            raise NodesConfig(str(exc)) from None
        except MinorTwice as exc:
            raise MinorBoundTwice(str(exc)) from None
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
