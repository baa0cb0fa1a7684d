"""The tracker's named refusals.

Each is a :class:`aos.refusals.Refusal`, printed by the CLI as
``refused: NAME: detail`` (exit 1). The database's triggers raise the same names
(``RAISE(ABORT, 'NAME: detail')``), and :func:`from_sqlite_error` maps such an
error back to its class, so a rule refused in SQL reads the same as one refused
in Python. One trigger raises a stream refusal: evidence without a sealed
verdict is ``stream-verdict``, as ``attach`` and ``verdict`` refuse it.
PostgreSQL's PL/pgSQL triggers raise the same messages (``RAISE EXCEPTION``),
mapped by :func:`from_db_error`. Names go back to classes through the one registry
(:func:`aos.refusals.refusal_by_name`).
"""

from __future__ import annotations

import re
import sqlite3

from aos.refusals import Refusal, StreamVerdict, refusal_by_name

__all__ = [
    "TrackerDatabase",
    "TrackerDependencyCycle",
    "TrackerDeviceSerial",
    "TrackerEvidenceDevices",
    "TrackerEvidenceImmutable",
    "TrackerEvidenceLane",
    "TrackerEvidenceRequired",
    "TrackerEvidenceTime",
    "TrackerExists",
    "TrackerHardwareEvidence",
    "TrackerImport",
    "TrackerInvalid",
    "TrackerJournal",
    "TrackerKeyUntrusted",
    "TrackerMissing",
    "TrackerPhysicalPass",
    "TrackerRefusal",
    "TrackerRunImmutable",
    "TrackerSchema",
    "TrackerSessionUnproven",
    "TrackerSiteDir",
    "TrackerStreamAttached",
    "TrackerStreamChanged",
    "TrackerUnknown",
    "from_db_error",
    "from_sqlite_error",
    "is_db_error",
]


class TrackerRefusal(Refusal, abstract=True):
    """Base of the tracker's refusals (never raised itself)."""

    name = "tracker-refused"


class TrackerMissing(TrackerRefusal):
    """No tracker database at the path (run ``alpha tracker init``)."""

    name = "tracker-missing"


class TrackerSchema(TrackerRefusal):
    """Not a tracker database, one newer than this tool, or one whose rules were removed."""

    name = "tracker-schema"


class TrackerDatabase(TrackerRefusal):
    """The database could not be read or written (locked past the busy timeout, I/O)."""

    name = "tracker-database"


class TrackerUnknown(TrackerRefusal):
    """An id that names no milestone, item, run, device, experiment or evidence."""

    name = "tracker-unknown"


class TrackerExists(TrackerRefusal):
    """An id that is already taken."""

    name = "tracker-exists"


class TrackerInvalid(TrackerRefusal):
    """A value the schema does not allow (a status, an id, a state)."""

    name = "tracker-invalid"


class TrackerDependencyCycle(TrackerRefusal):
    """A dependency that would make an item depend on itself."""

    name = "tracker-dependency-cycle"


class TrackerRunImmutable(TrackerRefusal):
    """A change to a terminal run, or to its evidence, measurements or devices."""

    name = "tracker-run-immutable"


class TrackerEvidenceRequired(TrackerRefusal):
    """An item marked verified without passing evidence from a completed run."""

    name = "tracker-evidence-required"


class TrackerHardwareEvidence(TrackerRefusal):
    """A hardware item marked verified without a sealed physical pass from a completed run."""

    name = "tracker-hardware-evidence"


class TrackerPhysicalPass(TrackerRefusal):
    """A physical pass recorded on a run without a linked sealed pass of scope physical."""

    name = "tracker-physical-pass"


class TrackerSessionUnproven(TrackerRefusal):
    """A physical pass recorded on a run one of whose sessions' members did not run or is not proven."""

    name = "tracker-session-unproven"


class TrackerStreamChanged(TrackerRefusal):
    """A stream attached again, or audited, whose file no longer matches its recorded seal."""

    name = "tracker-stream-changed"


class TrackerStreamAttached(TrackerRefusal):
    """A stream that is already evidence for another run."""

    name = "tracker-stream-attached"


class TrackerEvidenceImmutable(TrackerRefusal):
    """An edit of attached evidence or of an evidence link."""

    name = "tracker-evidence-immutable"


class TrackerKeyUntrusted(TrackerRefusal):
    """A stream not signed by a key the tracker trusts, where it trusts some."""

    name = "tracker-key-untrusted"


class TrackerEvidenceLane(TrackerRefusal):
    """A stream whose gate is not its run's lane (or a lane changed under evidence)."""

    name = "tracker-evidence-lane"


class TrackerEvidenceTime(TrackerRefusal):
    """A stream recorded (its stream.open) before its run started."""

    name = "tracker-evidence-time"


class TrackerEvidenceDevices(TrackerRefusal):
    """A stream not observed on every device its run names."""

    name = "tracker-evidence-devices"


class TrackerDeviceSerial(TrackerRefusal):
    """A GPU's serial changed after it was recorded beside its UUID."""

    name = "tracker-device-serial"


class TrackerEvidenceSource(TrackerRefusal):
    """A stream not recorded at the commit its run names (its CI job's commit), or naming none."""

    name = "tracker-evidence-source"


class TrackerJournal(TrackerRefusal):
    """An edit of the journal, or an entry that does not follow the last one."""

    name = "tracker-journal"


class TrackerSiteDir(TrackerRefusal):
    """``alpha tracker site DIR``: DIR is not empty and not a site it wrote, or a page would replace a file it did
    not write (raised by :mod:`tracker.site`, never by a trigger)."""

    name = "tracker-site-dir"


class TrackerImport(TrackerRefusal):
    """``alpha tracker import SOURCE``: the source fails its audit, is not at this tool's schema, is the target
    itself, or would re-point an old run number; nothing is written to the target (raised by
    :mod:`tracker.importing`, never by a trigger)."""

    name = "tracker-import"


_TRIGGER_MESSAGE = re.compile(r"^((?:tracker|stream)-[a-z-]+): (.*)$", re.DOTALL)


def _trigger_refusal(message: str, prefix: str) -> Refusal | None:
    """The refusal a trigger's ``NAME: detail`` message names: a tracker refusal, or ``stream-verdict``
    (a trigger refuses evidence without a sealed verdict as the stream refusal ``attach`` gives)."""
    match = _TRIGGER_MESSAGE.match(message)
    if match is None:
        return None
    try:
        cls = refusal_by_name(match.group(1))
    except KeyError:
        return None
    if not issubclass(cls, TrackerRefusal) and cls is not StreamVerdict:
        return None
    return cls(prefix + match.group(2))


def from_sqlite_error(exc: sqlite3.Error, context: str = "") -> Refusal:
    """The refusal a database error stands for.

    A trigger's ``NAME: detail`` becomes that refusal; a UNIQUE conflict is
    ``tracker-exists``; any other constraint is ``tracker-invalid``. ``context``
    (e.g. ``"run 3"``) is prefixed to the detail.
    """
    message = str(exc)
    prefix = f"{context}: " if context else ""
    refusal = _trigger_refusal(message, prefix)
    if refusal is not None:
        return refusal
    if "UNIQUE constraint failed" in message:
        return TrackerExists(prefix + message)
    if isinstance(exc, sqlite3.IntegrityError):
        return TrackerInvalid(prefix + message)
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in message:
        return TrackerSchema(prefix + message)
    return TrackerDatabase(prefix + message)


def _is_psycopg_error(exc: BaseException) -> bool:
    if not type(exc).__module__.startswith("psycopg"):
        return False  # psycopg is never imported just to ask
    import psycopg

    return isinstance(exc, psycopg.Error)


def is_db_error(exc: BaseException) -> bool:
    """True for an error of either backend's database driver (``sqlite3.Error``, ``psycopg.Error``)."""
    return isinstance(exc, sqlite3.Error) or _is_psycopg_error(exc)


def from_db_error(exc: BaseException, context: str = "") -> Refusal:
    """The refusal a database error of either backend stands for (see :func:`from_sqlite_error`).

    PostgreSQL: a trigger's ``NAME: detail`` becomes that refusal; a unique
    violation is ``tracker-exists``; another integrity or data error (a CHECK, a
    foreign key, a value of the wrong type) is ``tracker-invalid``; a lock wait
    past the busy timeout, a lost connection or anything else is ``tracker-database``.
    """
    if isinstance(exc, sqlite3.Error):
        return from_sqlite_error(exc, context)
    prefix = f"{context}: " if context else ""
    diag = getattr(exc, "diag", None)
    message = (getattr(diag, "message_primary", None) or str(exc)).strip()
    state = str(getattr(exc, "sqlstate", None) or "")
    refusal = _trigger_refusal(message, prefix)
    if refusal is not None:
        return refusal
    if state == "23505":
        return TrackerExists(prefix + message)
    if state.startswith(("23", "22")):
        return TrackerInvalid(prefix + message)
    return TrackerDatabase(prefix + message)
