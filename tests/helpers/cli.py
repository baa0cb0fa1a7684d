"""The one way the tests run ``alpha`` in this process: click's runner on ``observe.cli.root:main``.

Tests take it as the ``cli`` fixture (tests/conftest.py); module-level helpers call
:func:`invoke` itself. An exception the command does not turn into an exit code fails the
test where it was raised (``catch_exceptions=False``), unless a test asks to inspect it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from click.testing import CliRunner, Result


def invoke(
    *args: str,
    input: str | bytes | None = None,
    env: Mapping[str, str | None] | None = None,
    catch_exceptions: bool = False,
    prog_name: str | None = None,
) -> Result:
    """``alpha ARGS...`` run in this process; ``env`` is set for the call (``None`` removes a name)."""
    from observe.cli.root import main

    return CliRunner().invoke(
        main, list(args), input=input, env=env, catch_exceptions=catch_exceptions, prog_name=prog_name
    )


#: The type of the ``cli`` fixture.
Cli = Callable[..., Result]
