"""``python3 -m lanekit PHASE LANE OUT [CONFIG]``: run one step of a device lane.

PHASE is a step name of docs/GATES.md "Lane receipts" (static-build,
static-check, preflight, build, refusal-wrong-uuid, refusal-wrong-product,
uninterrupted-run, split-run, host-shadow-control, fresh-evaluation,
corrupted-checkpoint, qualification), or ``check``: what the lane needs on each
node, before a recording (lanekit/check.py); LANE is partitioned, coordinates or
independent. The scripts in scripts/ci/ run each step under ``alpha observe step``.
A refusal of the driver's (``host-key-unknown``, ``host-key-changed``,
``node-unreachable``, ``remote-digest``) is printed as ``refused: NAME: ...`` and
exits with its code (lanekit/refusals.py). An interrupt ends the phase quietly,
no traceback: SIGINT with exit 130, SIGTERM with 143.
"""

from __future__ import annotations

import signal
import sys

from .check import check
from .phases import PHASES, ConfigError
from .refusals import LaneRefusal
from .spec import LANES

#: The gate's steps, and the check run before a recording (not a step of the gate).
COMMANDS = {**PHASES, "check": check}


class Interrupted(BaseException):
    """SIGTERM (a CI's cancel, sent on by the recorder), raised where the phase is, as SIGINT raises
    KeyboardInterrupt: the phase unwinds (its roles ended by their ``finally``) instead of dying where it stands."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupted(signum: int, _frame: object) -> None:
    raise Interrupted(signum)


def main(argv: list[str]) -> int:
    """Dispatch one phase; usage errors exit 2."""
    if len(argv) not in (3, 4) or argv[0] not in COMMANDS or argv[1] not in LANES:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    phase, lane, out = argv[:3]
    config = argv[3] if len(argv) == 4 else None
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        return COMMANDS[phase](lane, out, config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except LaneRefusal as exc:
        # The driver's own refusals on a node (host key, reachability, a digest there): outputs are kept.
        print(exc.diagnostics(), file=sys.stderr, flush=True)
        return exc.exit_code
    except (KeyboardInterrupt, Interrupted) as exc:
        # The operator's interrupt (sent on by the recorder): the phase stops here, quietly; the lane stops too.
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        print(f"{phase}: interrupted ({signal.Signals(signum).name})", file=sys.stderr, flush=True)
        return 128 + signum


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
