"""The ``alpha`` entry point: ``receipt`` and ``step`` without click; everything else through ``observe.cli.root``.

A lane calls ``alpha observe receipt`` and ``alpha observe step`` hundreds of times, so
their start-up is most of their cost: this module imports nothing but the standard
library (and ``observe.exits``, which is no more) until it knows the command. A plain
invocation of either (the forms below) goes straight to ``observe.channel.client``; any
other (``--help``, ``--status=pass``, an option before NAME, a value that starts with
``-``, a bad ``--field``...) goes to the click command line, which gives the same result
or the usual usage error:

    alpha observe receipt NAME [--status S | --field K=V | --json OBJ]...
    alpha observe step NAME [--standalone]... [--] COMMAND...   (COMMAND not starting with -)
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

from observe.exits import Exit, ResourceExit, leave_now

__all__ = ["main", "parse_receipt", "parse_step"]


def parse_receipt(args: Sequence[str]) -> tuple[str, str, list[tuple[str, str]], str | None] | None:
    """``(name, status, fields, json_obj)`` as click would give ``receipt`` for ``args``; None: ask click."""
    from aos.attrs import RECEIPT_STATUSES  # the --status choices of observe.cli.record's receipt

    if not args or args[0].startswith("-"):
        return None
    name, status, fields, json_obj = args[0], "info", [], None
    rest = list(args[1:])
    if len(rest) % 2:
        return None
    for option, value in zip(rest[::2], rest[1::2], strict=True):
        if value.startswith("-"):
            return None
        if option == "--status" and value in RECEIPT_STATUSES:
            status = value
        elif option == "--field":
            key, sep, _ = value.partition("=")
            if not sep or not key:
                return None
            fields.append((key, value[len(key) + 1 :]))
        elif option == "--json":
            json_obj = value
        else:
            return None
    return name, status, fields, json_obj


def parse_step(args: Sequence[str]) -> tuple[str, bool, list[str]] | None:
    """``(name, standalone, argv)`` as ``step`` ends up with for ``args``; None: ask click."""
    if not args or args[0].startswith("-"):
        return None
    name, standalone, i = args[0], False, 1
    while i < len(args) and args[i] == "--standalone":
        standalone, i = True, i + 1
    if i < len(args) and args[i] == "--":
        i += 1
    argv = list(args[i:])
    if not argv or argv[0].startswith("-"):
        return None
    return name, standalone, argv


def _fast(args: Sequence[str]) -> int | None:
    """The exit code of a plain ``receipt`` or ``step``, run without click; None for anything else."""
    if len(args) < 3 or args[0] != "observe":
        return None
    if args[1] == "receipt":
        parsed = parse_receipt(args[2:])
        if parsed is None:
            return None
        from observe.channel import client

        name, status, fields, json_obj = parsed
        try:
            merged = client.build_fields(fields, json_obj)
        except ValueError:
            return None  # click says it as a usage error
        return client.receipt(name, status, merged)
    if args[1] == "step":
        parsed_step = parse_step(args[2:])
        if parsed_step is None:
            return None
        from observe.channel import client

        name, standalone, argv = parsed_step
        return client.step(name, argv, standalone=standalone)
    return None


def main() -> None:
    """``alpha``: see the module's docstring.

    An error of the machine that no command caught (a thread, memory or a descriptor that
    could not be had while the tool starts) is printed as ``refused: resource: ...`` and
    exits 1, with its traceback before it only under ``ALPHA_DEBUG=1``; an interrupt (SIGINT)
    exits 130, without one.
    """
    try:
        code = _fast(sys.argv[1:])
        if code is not None:
            sys.exit(code)
        from observe.cli.root import main as cli

        cli()
    except KeyboardInterrupt:
        sys.exit(
            Exit.SIGNAL + signal.SIGINT
        )  # 130: an interrupt (a lane's Ctrl-C reaching `receipt` or `step`): quietly, as a shell says it
    except ResourceExit as done:  # printed already; the teardown may crash (observe.exits.leave_now)
        leave_now(done.code if isinstance(done.code, int) else Exit.FAIL)
    except (SystemExit, GeneratorExit):
        raise
    except BaseException as exc:  # a Rust extension's panic is a BaseException
        from observe.refusals import debugging, resource_refusal

        refusal = resource_refusal(exc)
        if refusal is None:
            raise
        if debugging():
            import traceback

            traceback.print_exc()
        sys.stderr.write(refusal.diagnostics() + "\n")
        leave_now(Exit.FAIL)
