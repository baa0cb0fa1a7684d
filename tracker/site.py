"""The tracker as a static site: ``alpha tracker site DIR``.

The site says what the attached streams prove, not what the tracker's rows
claim. Every evidence row's stream is located (a local file whose BLAKE3 is
the one recorded, or a fresh copy fetched from the store URL it was attached
from), verified and its columns derived again through the code path ``attach``
and ``audit`` use (:func:`tracker.streams.derive`); the verdict, scope, gate,
devices and artifacts shown are the stream's. A stream that is gone is
``missing``, one whose bytes no longer match or no longer verify ``damaged``,
one whose row says something else than the stream ``disagrees`` (each column
named). Those facts then decide what the site calls verified: an item the
tracker holds as verified is shown verified only when its linked streams
prove it by the tracker's own rule (a completed run every stream of which is a
sealed pass, and for a hardware item one of scope ``physical``); otherwise it
is shown as *claimed*, with the reason. A run's physical pass likewise.

Pages: ``index.html`` (milestones, items, what has run and on which GPUs the
recorder observed, what has not run), the runs ``RUNS_PER_PAGE`` a page: pages
numbered from the oldest (``index-1.html`` the first 100 runs in start order,
...) and the newest runs on ``index.html``, so an added run rewrites
``index.html`` and, when it fills a page, two pages; ``runs/<id>.html`` per run, and
``streams/<stream_id>.html`` per available stream (``observe.report.write``). Links
are relative; pages load nothing from outside the folder (a Content Security
Policy forbids scripts and remote loads on the tracker's own pages).

Regenerating is idempotent: no clock, stable order, a file rewritten only when
its bytes change. ``alpha-site.json`` lists every file the site wrote (with
its SHA-256) and, for each report and run page, what it was made from (a
report: the stream's BLAKE3 and file name, its link back, a digest of the
report code; a run page: the run, its streams' views, its item's anchor, a
digest of this module and its templates): a page made from the same and
unchanged since is kept, not made again (a report reads the whole stream); whether it is unchanged
since is known from this user's memo of each page's file identity (``_Previous``), without reading
it. So an added run costs its own stream and pages, not every run's (issue 36). Pages that no longer
belong are removed, never a file it did not write. A folder that is not empty and not such a site is refused
(``tracker-site-dir``), unless each of its files is a page the build writes, byte for byte: what a build
stopped before its manifest (Ctrl-C) leaves, so the next build finishes it.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos import kinds
from aos.attrs import json_int
from aos.refusals import Refusal
from aos.text import display
from gates.wording import count
from observe.util import formatting
from observe.util.atomic import replace_file
from tracker.backends import Connection
from tracker.refusals import TrackerSiteDir

if TYPE_CHECKING:
    from aos.signing import Verifier
    from tracker.streams import StreamFacts

__all__ = [
    "MANIFEST",
    "Artifact",
    "Item",
    "Run",
    "Site",
    "SiteResult",
    "StreamView",
    "TrackerSiteDir",
    "build_site",
    "write_site",
]

#: The site's own record of the files it wrote (relative path -> SHA-256).
MANIFEST = "alpha-site.json"
GENERATOR = "alpha tracker site"
MANIFEST_FORMAT = 1
#: Runs listed per page of the site's runs (``index.html`` shows the newest; ``index-K.html`` the older ones).
RUNS_PER_PAGE = 100


# -- the model -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Artifact:
    """One ``artifact`` event of a stream: what the recorder captured."""

    path: str
    size: int | None
    sha256: str | None
    kind: str
    content: str | None
    masked: bool


@dataclass(frozen=True)
class Gpu:
    """A GPU the recorder observed (``device.observed``)."""

    uuid: str
    name: str
    observer: str
    driver: str | None
    serial: str | None = None  # its health's serial, as NVML gave it (docs/FORMAT.md section 4.1)
    health: str | None = None  # its health at the stream's last observation of it, in one line (gpu_health)
    node: str = ""  # the remote node that showed it (HOST:PORT); "" for the recorder's own machine


@dataclass
class StreamView:
    """One attached stream: what the tracker's row says and what the stream proves.

    ``state``: ``proven`` (verified, every derived column as the row says),
    ``disagrees`` (verified, but the row says otherwise: ``differ``), ``damaged``
    (the bytes no longer match the recorded digest, or no longer verify) or
    ``missing`` (no file, not in the store). Only the first two have ``facts``.
    """

    evidence_id: int
    stream_id: str
    run_id: str
    location: str
    row: dict[str, Any]
    state: str = "missing"
    detail: str = ""
    facts: StreamFacts | None = None
    differ: list[str] = field(default_factory=list)
    gpus: list[Gpu] = field(default_factory=list)
    observers: list[str] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    #: The stream's report page, relative to the site's root (None: not available here).
    page: str | None = None
    report_note: str | None = None
    local: Path | None = None
    #: What a verified local view was derived from (``_view_key``): the run page's key names it, not the view.
    key: str | None = None

    @property
    def available(self) -> bool:
        return self.facts is not None

    @property
    def verdict(self) -> str | None:
        return self.facts.verdict if self.facts else None

    @property
    def scope(self) -> str | None:
        return self.facts.scope if self.facts else None

    @property
    def anchor(self) -> str:
        return "stream-" + _safe(self.stream_id)


@dataclass
class Run:
    """A run, with its streams and what they prove."""

    id: str
    page: str
    legacy_id: int | None
    experiment: str | None
    item: str | None
    lane: str | None
    state: str
    physical_pass_claimed: bool
    note: str | None
    started_at: str
    finished_at: str | None
    ci: dict[str, str | None] | None
    devices: list[dict[str, Any]]
    measurements: list[dict[str, Any]]
    streams: list[StreamView] = field(default_factory=list)
    sessions: list[SessionView] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return "run-" + _safe(self.id)

    @property
    def not_proven(self) -> list[str]:
        """The members of the run's sessions that did not run or are not proven, as the folders show them now."""
        return [f"{s.origin}: {m['member']}" for s in self.sessions for m in s.members if m["now"] != "proven"]

    @property
    def verdict(self) -> str:
        """The run's evidence as its streams prove it: ``pass`` only when every stream is a proven pass."""
        if not self.streams:
            return "no evidence"
        if not all(s.available for s in self.streams):
            known = {s.verdict for s in self.streams if s.available}
            return "fail" if "fail" in known else "unproven"
        verdicts = {s.verdict for s in self.streams}
        if verdicts == {"pass"}:
            return "pass"
        return "fail" if "fail" in verdicts else "inconclusive"

    @property
    def scopes(self) -> list[str]:
        return sorted({s.scope for s in self.streams if s.scope})

    @property
    def physical_pass_proven(self) -> bool:
        """The tracker's rule, on the streams' facts: completed, every stream a pass, one of scope physical."""
        return (
            self.state == "completed"
            and self.verdict == "pass"
            and any(s.scope == "physical" for s in self.streams)
            and not self.not_proven
        )

    @property
    def gpus(self) -> list[Gpu]:
        seen: dict[tuple[str, str, str | None, str], Gpu] = {}
        for s in self.streams:
            for g in s.gpus:
                seen.setdefault((g.uuid, g.observer, g.driver, g.node), g)
        return [seen[k] for k in sorted(seen, key=lambda k: (k[3], k[0], k[1], k[2] or ""))]

    @property
    def gpus_by_node(self) -> list[tuple[str, list[Gpu]]]:
        """The run's GPUs, one list per node (``""``: the recorder's own machine), in node order."""
        nodes: dict[str, list[Gpu]] = {}
        for g in self.gpus:
            nodes.setdefault(g.node, []).append(g)
        return list(nodes.items())

    @property
    def observers(self) -> list[str]:
        return sorted({o for s in self.streams for o in s.observers})


@dataclass
class Item:
    """A work item: its status as the tracker holds it and as the evidence proves it."""

    id: str
    anchor: str
    title: str
    milestone: str
    hardware: bool
    claimed: str
    #: What the site shows: the claimed status, or ``claimed-verified`` when the streams do not prove it.
    shown: str
    proof: str
    depends_on: list[str]
    runs: list[str]
    streams: list[str]


@dataclass
class Milestone:
    id: str
    anchor: str
    title: str
    items: list[Item]

    def count(self, shown: str) -> int:
        return sum(1 for i in self.items if i.shown == shown)


@dataclass
class Site:
    """Everything the pages show."""

    milestones: list[Milestone]
    items: dict[str, Item]
    runs: list[Run]
    streams: list[StreamView]

    def count(self, shown: str) -> int:
        return sum(1 for i in self.items.values() if i.shown == shown)

    # The index's sums over every run, each made once a build (the template asked for some of them once per
    # item or twice: a tenth of an added run's build at 10,000 runs).

    @functools.cached_property
    def runs_by_id(self) -> dict[str, Run]:
        return {r.id: r for r in self.runs}

    @functools.cached_property
    def run_states(self) -> dict[str, int]:
        """How many runs are in each state."""
        return dict(collections.Counter(r.state for r in self.runs))

    @functools.cached_property
    def physical_passes(self) -> int:
        """How many runs' physical pass their streams prove."""
        return sum(1 for r in self.runs if r.physical_pass_proven)

    @functools.cached_property
    def runs_without_streams(self) -> list[Run]:
        return [r for r in self.runs if not r.streams]

    @functools.cached_property
    def problem_streams(self) -> list[StreamView]:
        """The streams the site cannot vouch for (not ``proven``)."""
        return [s for s in self.streams if s.state != "proven"]

    @property
    def not_run(self) -> list[Item]:
        """Items no run is for (by experiment) and no stream is linked to."""
        return [i for m in self.milestones for i in m.items if not i.runs and not i.streams]

    @property
    def no_physical_run(self) -> list[tuple[Item, list[str]]]:
        """Hardware items that have runs, none holding a stream of scope physical readable here (with the
        scopes their runs' streams do have)."""
        runs = self.runs_by_id
        out = []
        for m in self.milestones:
            for i in m.items:
                scopes = sorted({s.scope for r in i.runs if r in runs for s in runs[r].streams if s.scope})
                if i.hardware and i.runs and "physical" not in scopes:
                    out.append((i, scopes))
        return out

    @functools.cached_property
    def gpus(self) -> list[dict[str, Any]]:
        """Every GPU the recorder observed in an available stream, with the runs it was seen in."""
        by: dict[tuple[str, str], dict[str, Any]] = {}
        for r in self.runs:
            for s in r.streams:
                for g in s.gpus:
                    d = by.setdefault((g.uuid, g.observer), {"uuid": g.uuid, "observer": g.observer, "names": set(),
                                                            "drivers": set(), "runs": {}, "serial": None,
                                                            "health": None})  # fmt: skip
                    d["names"].add(g.name)
                    d["serial"] = d["serial"] or g.serial
                    if g.health is not None:  # the runs come in start order: the last one's health is kept
                        d["health"] = (r.id, g.health)
                    if g.driver:
                        d["drivers"].add(g.driver)
                    d["runs"][r.id] = r
        return [
            {**d, "names": sorted(d["names"]), "drivers": sorted(d["drivers"]), "runs": list(d["runs"].values())}
            for _, d in sorted(by.items())
        ]

    def stream_count(self, state: str) -> int:
        return self._stream_states.get(state, 0)

    @functools.cached_property
    def _stream_states(self) -> dict[str, int]:
        return dict(collections.Counter(s.state for s in self.streams))


# -- reading the tracker and its streams ------------------------------------------------------------

_SAFE = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{0,99}")


def _safe(ident: str) -> str:
    """An id as a file name or an HTML id: itself when plainly safe, else a digest of it (ids are the
    tracker's rows, which a client with write access can set to anything, ``../x`` included)."""
    if _SAFE.fullmatch(ident):
        return ident
    return "x" + hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()[:32]


_USERINFO = re.compile(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", re.IGNORECASE)


def _redact(location: str) -> str:
    """``location`` without a URL's user and password (a path, without ``@``, as it is)."""
    return _USERINFO.sub(r"\1***@", location) if "@" in location else location


def _read_observed(view: StreamView, path: Path) -> None:
    """The GPUs the recorder observed and the artifacts it captured, from a verified stream."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from aos.reader import StreamFile, compute, is_in, read_options, string_set
    from aos.schema import COLUMNS
    from aos.text import display

    fields = [COLUMNS.index("kind"), COLUMNS.index("attrs")]
    wanted = string_set([kinds.DEVICE_OBSERVED, kinds.ARTIFACT])
    gpus: dict[tuple[str, str, str | None, str], Gpu] = {}
    observers: set[str] = set()
    with StreamFile(path) as f:
        for batch in ipc.open_stream(pa.py_buffer(f.view), options=read_options(included_fields=fields)):
            mask = is_in(batch.column(0), wanted)
            if not compute("any", mask).as_py():
                continue
            batch = batch.filter(mask)
            for kind, text in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
                attrs = json.loads(text)
                if not isinstance(attrs, dict):
                    continue
                if kind == kinds.ARTIFACT:
                    sha = attrs.get("sha256")
                    view.artifacts.append(
                        Artifact(
                            path=display(attrs.get("path")),
                            size=json_int(attrs.get("size")),
                            sha256=sha if isinstance(sha, str) else None,
                            kind=str(attrs.get("kind") or "file"),
                            content=attrs.get("content") if isinstance(attrs.get("content"), str) else None,
                            masked=attrs.get("masked") is True,
                        )
                    )
                    continue
                observer = str(attrs.get("observer") or "none")
                observers.add(observer)
                driver = attrs.get("driver") if isinstance(attrs.get("driver"), str) else None
                listed = attrs.get("gpus")
                events = [e for e in attrs.get("gpu_events") or [] if isinstance(e, dict)]
                node = _node_name(attrs.get("node"))
                for gpu in listed if isinstance(listed, list) else []:
                    if isinstance(gpu, dict) and isinstance(gpu.get("uuid"), str):
                        key = (gpu["uuid"], observer, driver, node)
                        made = Gpu(gpu["uuid"], str(gpu.get("name") or "?"), observer, driver, node=node)
                        g = gpus.setdefault(key, made)
                        mine = [e for e in events if e.get("gpu") == gpu["uuid"]]
                        gpus[key] = _health_of(g, gpu.get("health"), mine)
            del batch
    view.gpus = [gpus[k] for k in sorted(gpus, key=lambda k: (k[3], k[0], k[1], k[2] or ""))]
    view.observers = sorted(observers)


def _node_name(node: Any) -> str:
    """A remote node as the site names it (``HOST:PORT``); "" for the recorder's own machine."""
    if not isinstance(node, dict):
        return ""
    port = node.get("port")
    return str(node.get("host") or "?") + (f":{port}" if isinstance(port, int) else "")


def _health_of(g: Gpu, health: Any, events: list[dict[str, Any]]) -> Gpu:
    """``g`` with one observation's ``health`` of it (and its GPU events): its serial, and the line of
    :func:`gpu_health` (a fault seen earlier in the stream stays said)."""
    if not isinstance(health, dict):
        return g
    serial = health.get("serial")
    faults = [f for f in (g.health or "").split("; ") if f.startswith(("XID", "double-bit"))]
    faults += [f"XID {json_int(e.get('xid'))}" if e.get("type") == "xid" else "double-bit ECC error"
               for e in events if e.get("type") in ("xid", "double_bit_ecc")]  # fmt: skip
    return dataclasses.replace(
        g,
        serial=g.serial or (display(serial) if isinstance(serial, str) and serial else None),
        health="; ".join([gpu_health(health), *dict.fromkeys(faults)]),
    )


def gpu_health(health: dict[str, Any]) -> str:
    """One GPU's health in one line for the site: ECC mode and uncorrected errors, row remaps (or retired pages),
    the PCIe link; ``?`` for a fact NVML did not offer (docs/FORMAT.md section 4.1 names each)."""

    def fact(name: str) -> str:
        value = health.get(name)
        if name in (health.get("unsupported") or {}) or value is None:
            return "?"
        return ("yes" if value else "no") if isinstance(value, bool) else display(str(value))

    remaps = (
        f"row remaps pending {fact('remap_pending')}, failed {fact('remap_failure')}"
        if "remap_pending" not in (health.get("unsupported") or {})
        else f"retired pages pending {fact('retired_pages_pending')}"
    )
    return (
        f"ECC {fact('ecc_mode')}, uncorrected {fact('ecc_volatile_uncorrected')} volatile / "
        f"{fact('ecc_aggregate_uncorrected')} aggregate; {remaps}; PCIe gen {fact('pcie_gen_max')} "
        f"x{fact('pcie_width')} of x{fact('pcie_width_max')}"
    )


def _locate(view: StreamView, fetch_dir: Path) -> Path | None:
    """The stream's bytes here: the local file when its digest is the recorded one, or a fresh copy
    from its store; None (with ``state`` and ``detail`` said) otherwise."""
    row = view.row
    if row["url"]:
        from aos.refusals import StreamMissing
        from observe.refusals import StoreUnreachable
        from observe.store import fetch

        copy = fetch_dir / f"{view.evidence_id}.aos"
        try:
            return fetch(row["url"], copy)
        except (StreamMissing, StoreUnreachable) as exc:
            view.state, view.detail = "missing", f"not in the store: {exc.diagnostics()}"
        except Refusal as exc:
            view.state, view.detail = "damaged", f"the stored copy is refused: {exc.diagnostics()}"
        return None
    path = Path(row["path"])
    try:
        if not path.is_file():
            view.state, view.detail = "missing", "the file is gone"
            return None
        from tracker.streams import file_blake3

        digest = file_blake3(path)
    except OSError as exc:
        view.state, view.detail = "missing", f"the file cannot be read: {exc.strerror or exc}"
        return None
    if digest != row["file_digest"]:
        view.state = "damaged"
        view.detail = f"the file no longer matches the digest recorded at attach (its BLAKE3 is now {digest})"
        return None
    return path


@dataclass
class SessionView:
    """A fleet session attached to a run: its members as the tracker recorded them (``status``, ``reason``) and as
    its folder, verified again, shows them now (``now``, ``now_reason``); ``state`` is ``proven`` (the folder
    verifies and says what was recorded), ``missing`` or ``damaged`` (with ``detail``)."""

    origin: str
    root: str
    location: str
    members: list[dict[str, Any]]
    state: str = "proven"
    detail: str = ""


def _session_view(sess: dict[str, Any]) -> SessionView:
    """Verify the session's folder again (tracker.sessions, as attach did) and say what it proves now."""
    from tracker.sessions import session_rows, verify_trusted

    view = SessionView(sess["origin"], sess["root"], _redact(sess["path"]), [dict(m) for m in sess["members"]])
    directory = Path(sess["path"])
    for m in view.members:
        m["now"], m["now_reason"] = "not-proven", "its session's folder was not verified here"
    if not directory.is_dir():
        view.state, view.detail = "missing", f"the session's folder is not here: {view.location}"
        return view
    try:
        report = verify_trusted(directory, {})
    except Refusal as exc:
        view.state, view.detail = "damaged", f"the session no longer verifies: {exc.diagnostics()}"
        return view
    now = {r["member"]: r for r in session_rows(report, directory)}
    if report.origin != view.origin or report.root != view.root:
        view.state, view.detail = "damaged", f"the folder holds another session ({report.origin}, root {report.root})"
        return view
    for m in view.members:
        r = now.get(m["member"])
        if r is not None:
            m["now"], m["now_reason"] = r["status"], r["reason"]
    changed = [m["member"] for m in view.members if m["now"] != m["status"]]
    if changed:
        view.state, view.detail = "disagrees", "members whose status changed since attached: " + ", ".join(changed)
    else:
        view.detail = "verified again from its folder: every member as the tracker recorded it"
    return view


def _check(view: StreamView, path: Path, keys: Mapping[str, Verifier]) -> None:
    from tracker.streams import derive

    try:
        facts = derive(path, keys, require_trusted=False, keep=True)
    except Refusal as exc:
        view.state, view.detail = "damaged", f"no longer verifies: {exc.diagnostics()}"
        return
    view.facts, view.local = facts, path
    derived = facts.columns()
    row = view.row
    differ = facts.differing(row)
    view.differ = [f"{c}: {row[c]!r} in the tracker, {derived[c]!r} in the stream" for c in differ]
    if differ:
        view.state = "disagrees"
        view.detail = "the tracker's row differs from the stream (the stream's values are shown)"
    else:
        signature = ", signature good" if facts.signature_checked else ""
        view.state = "proven"
        view.detail = f"intact and sealed, every column as the stream says{signature}"
    _read_observed(view, path)


_EVIDENCE = (
    "SELECT id, run_id, stream_id, path, url, seal_head, file_digest, size, events, verdict, scope, gate,"
    " signed, key_id, recorded_at, devices, source_commit, attached_at FROM evidence ORDER BY id"
)


# -- the memo of streams checked: a local file unchanged since this user's last build is not read again --


def _memo_path(root: Path) -> Path:
    """This user's memo of the streams the site in ``root`` verified (``observe.util.cache``)."""
    from observe.util.cache import cache_folder

    return cache_folder("site-checked") / f"{hashlib.sha256(os.fsencode(os.path.abspath(root))).hexdigest()[:32]}.json"


def _derive_code() -> str:
    """A digest of the code that derives a stream's view (this module, ``tracker.streams``, ``aos``'s verifier):
    a view derived by other code is derived again."""
    import aos.verify
    import tracker.streams

    h = hashlib.sha256()
    for module in (__file__, tracker.streams.__file__, aos.verify.__file__):
        h.update(Path(str(module)).read_bytes())
    return h.hexdigest()


def _view_basis(keys: Mapping[str, Verifier], code: str) -> Any:
    """What every local view's key starts from (``_view_key``): the trusted keys and the deriving code."""
    return hashlib.sha256(f"{sorted(keys)}\0{code}\0".encode())


def _view_key(row: dict[str, Any], basis: Any) -> str | None:
    """What a local stream's view is derived from: its evidence row, its file's identity (device, inode, size,
    modification and change time: a write, rename or chmod changes the last), and ``basis`` (``_view_basis``:
    the trusted keys and the code). None for a stream kept in a store (fetched on every build)."""
    if row["url"]:
        return None
    try:
        st = os.stat(str(row["path"]))
    except OSError:
        return None
    # The row's values by ``repr`` (its columns are _EVIDENCE's, which the code's digest covers; SQLite gives
    # str, int, float, bytes or None, whose reprs differ: a size of "3272" is not 3272), half of JSON's cost.
    h = basis.copy()
    identity = f"{st.st_dev} {st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}"
    h.update(f"{tuple(row.values())!r}\0{identity}".encode())
    return h.hexdigest()  # type: ignore[no-any-return]


def _memo_entry(view: StreamView) -> list[Any] | None:
    """A verified view as the memo keeps it, by position (``_restore``; the memo's key covers this module, so
    an entry is read only by the code that wrote it); a view without facts is derived again on every build."""
    if view.facts is None:
        return None
    facts = [getattr(view.facts, name) for name in _facts_fields()]
    facts[0] = str(facts[0])
    return [
        view.state,
        view.detail,
        facts,
        view.differ,
        [[getattr(g, f.name) for f in dataclasses.fields(Gpu)] for g in view.gpus],
        view.observers,
        [[getattr(a, f.name) for f in dataclasses.fields(Artifact)] for a in view.artifacts],
    ]


@functools.cache
def _facts_fields() -> tuple[str, ...]:
    """``StreamFacts``' fields as the memo keeps them, in order: ``path`` first, no ``verification``."""
    from tracker.streams import StreamFacts

    fields = [f.name for f in dataclasses.fields(StreamFacts)]
    assert fields[0] == "path" and fields[-1] == "verification"  # noqa: PT018 - the order _restore relies on
    return tuple(fields[:-1])


@functools.cache
def _facts_tuples() -> tuple[int, int]:
    """Where ``devices`` and ``serials`` (tuples, which JSON keeps as lists) are among ``_facts_fields``."""
    names = _facts_fields()
    return names.index("devices"), names.index("serials")


def _restore(view: StreamView, entry: Any) -> bool:
    """Fill ``view`` from a memo entry (as read: its JSON text); False (``view`` untouched) when it is not one.

    By position, not by name: a tenth of a second at 10,000 streams (issue 36)."""
    from tracker.streams import StreamFacts

    try:
        if isinstance(entry, str):
            entry = json.loads(entry)
        state, detail, values, differ, gpus, observers, artifacts = entry
        if len(values) != len(_facts_fields()):
            return False
        values[0] = Path(values[0])
        devices, serials = _facts_tuples()
        values[devices] = tuple(values[devices])
        values[serials] = tuple(tuple(s) for s in values[serials])
        # Its fields in order, ``verification`` (the last) none: set as unpickling sets them, without the
        # frozen ``__init__``'s call per field (a third of this function at 10,000 streams).
        restored = object.__new__(StreamFacts)
        restored.__dict__.update(zip(_facts_fields(), values, strict=True), verification=None)
        gpus = [Gpu(*g) for g in gpus] if gpus else []
        artifacts = [Artifact(*a) for a in artifacts] if artifacts else []
        if not all(isinstance(x, str) for x in (state, detail, *differ, *observers)):
            return False
    except (KeyError, TypeError, ValueError, RecursionError):
        return False
    view.state, view.detail, view.facts, view.differ = state, detail, restored, list(differ)
    view.gpus, view.observers, view.artifacts = gpus, list(observers), artifacts
    view.local = restored.path
    return True


def build_site(conn: Connection, fetch_dir: Path, memo: dict[str, Any] | None = None) -> Site:
    """Read the tracker and every attached stream (store copies land in ``fetch_dir``).

    With ``memo`` (key -> view, ``_view_key``), a local stream whose key it holds is not read again; the
    entries of this build replace its contents."""
    from tracker.attach import trusted_keys
    from tracker.sessions import run_sessions

    keys = trusted_keys(conn)
    basis = _view_basis(keys, _derive_code()) if memo is not None else None
    fresh: dict[str, Any] = {}
    streams: list[StreamView] = []
    evidence = conn.execute(_EVIDENCE).fetchall()
    names = list(evidence[0].keys()) if evidence else []
    for r in evidence:
        row = dict(zip(names, r, strict=True))  # a row's values in _EVIDENCE's order: half of dict(row)'s cost
        view = StreamView(
            evidence_id=int(row["id"]),
            stream_id=str(row["stream_id"]),
            run_id=str(row["run_id"]),
            location=_redact(str(row["url"] or row["path"])),
            row=row,
        )
        key = _view_key(row, basis) if basis is not None else None
        kept = memo.get(key) if memo is not None and key is not None else None
        if key is not None and kept is not None and _restore(view, kept):
            fresh[key], view.key = kept, key
            streams.append(view)
            continue
        path = _locate(view, fetch_dir)
        if path is not None:
            _check(view, path, keys)
        entry = _memo_entry(view) if key is not None else None
        if key is not None and entry is not None:
            fresh[key], view.key = entry, key
        streams.append(view)
    if memo is not None:
        memo.clear()
        memo.update(fresh)

    run_streams: dict[str, list[StreamView]] = {}
    for s in streams:
        run_streams.setdefault(s.run_id, []).append(s)
    # Each table read once, not once per run (30,000 queries at 10,000 runs).
    run_devices: dict[str, list[dict[str, Any]]] = {}
    for d in conn.execute(
        "SELECT rd.run_id, d.product, d.uuid, d.driver FROM run_devices rd JOIN devices d ON d.id = rd.device_id"
        " ORDER BY rd.run_id, d.uuid"
    ).fetchall():
        run_devices.setdefault(str(d["run_id"]), []).append({"product": d["product"], "uuid": d["uuid"],
                                                             "driver": d["driver"]})  # fmt: skip
    run_measurements: dict[str, list[dict[str, Any]]] = {}
    for m in conn.execute("SELECT run_id, name, value, unit FROM measurements ORDER BY run_id, id").fetchall():
        run_measurements.setdefault(str(m["run_id"]), []).append({"name": m["name"], "value": m["value"],
                                                                  "unit": m["unit"]})  # fmt: skip
    with_sessions = {str(x[0]) for x in conn.execute("SELECT DISTINCT run_id FROM session_members").fetchall()}
    runs: list[Run] = []
    for r in conn.execute(
        "SELECT r.*, x.name AS experiment, x.item_id AS item FROM runs r"
        " LEFT JOIN experiments x ON x.id = r.experiment_id ORDER BY r.started_at, r.id"
    ).fetchall():
        run_id = str(r["id"])
        devices = run_devices.get(run_id, [])
        measurements = run_measurements.get(run_id, [])
        ci = (
            {"provider": r["ci_provider"], "job_url": r["ci_job_url"], "commit": r["ci_commit"]}
            if r["ci_provider"]
            else None
        )
        runs.append(
            Run(
                id=run_id,
                page=f"runs/{_safe(run_id)}.html",
                legacy_id=r["legacy_id"],
                experiment=r["experiment"],
                item=r["item"],
                lane=r["lane"],
                state=str(r["state"]),
                physical_pass_claimed=bool(r["physical_pass"]),
                note=r["note"],
                started_at=str(r["started_at"]),
                finished_at=r["finished_at"],
                ci=ci,
                devices=devices,
                measurements=measurements,
                streams=run_streams.get(run_id, []),
                sessions=[_session_view(x) for x in run_sessions(conn, run_id)] if run_id in with_sessions else [],
            )
        )
    by_run = {r.id: r for r in runs}
    by_evidence = {s.evidence_id: s for s in streams}

    links: dict[str, list[StreamView]] = {}
    for item_id, evidence_id in conn.execute("SELECT item_id, evidence_id FROM item_evidence ORDER BY 1, 2"):
        if int(evidence_id) in by_evidence:
            links.setdefault(str(item_id), []).append(by_evidence[int(evidence_id)])
    deps: dict[str, list[str]] = {}
    for item_id, dep in conn.execute("SELECT item_id, depends_on FROM item_deps ORDER BY 1, 2"):
        deps.setdefault(str(item_id), []).append(str(dep))

    items: dict[str, Item] = {}
    milestones: list[Milestone] = []
    for m in conn.execute("SELECT id, title FROM milestones ORDER BY position, id").fetchall():
        ms = Milestone(str(m["id"]), "milestone-" + _safe(str(m["id"])), str(m["title"]), [])
        for i in conn.execute(
            "SELECT id, title, hardware, status FROM items WHERE milestone_id = ? ORDER BY id", (ms.id,)
        ).fetchall():
            item_id = str(i["id"])
            linked = links.get(item_id, [])
            item_runs = [r.id for r in runs if r.item == item_id]
            item_runs += [s.run_id for s in linked if s.run_id not in item_runs]
            shown, proof = _item_status(str(i["status"]), bool(i["hardware"]), linked, by_run)
            item = Item(
                id=item_id,
                anchor="item-" + _safe(item_id),
                title=str(i["title"]),
                milestone=ms.id,
                hardware=bool(i["hardware"]),
                claimed=str(i["status"]),
                shown=shown,
                proof=proof,
                depends_on=deps.get(item_id, []),
                runs=item_runs,
                streams=[s.stream_id for s in linked],
            )
            ms.items.append(item)
            items[item_id] = item
        milestones.append(ms)
    return Site(milestones, items, runs, streams)


def _item_status(claimed: str, hardware: bool, linked: list[StreamView], runs: dict[str, Run]) -> tuple[str, str]:
    """(status shown, why): ``verified`` only when a linked stream proves it by the tracker's rule."""
    if claimed != "verified":
        if claimed == "implemented":
            return claimed, "code exists and its focused checks pass (the tracker's word; no evidence needed)"
        return claimed, ""
    why = "no stream is linked to it"
    for s in linked:
        run = runs.get(s.run_id)
        if not s.available:
            why = f"its stream {s.stream_id} is {s.state} here"
        elif s.verdict != "pass":
            why = f"its stream {s.stream_id}'s sealed verdict is {s.verdict}"
        elif run is None or run.state != "completed":
            why = f"the run of stream {s.stream_id} is not completed"
        elif run.verdict != "pass":
            why = f"not every stream of run {run.id} is a proven pass ({run.verdict})"
        elif hardware and s.scope != "physical":
            why = f"a hardware item needs a physical pass; stream {s.stream_id} has scope {s.scope}"
        else:
            scope = f", scope {s.scope}" if hardware else ""
            return "verified", f"stream {s.stream_id}: sealed pass{scope}, run {run.id} completed, every stream passed"
    return "claimed-verified", f"verified in the tracker, but not proven here: {why}"


# -- rendering ---------------------------------------------------------------------------------------


def _environment() -> Any:
    import jinja2

    from observe.util.templates import bytecode_cache

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
        bytecode_cache=bytecode_cache(),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["bytes"] = formatting.size
    env.filters["safe_url"] = _safe_url
    return env


def _safe_url(url: object) -> str | None:
    """An http(s) URL to link to; anything else (``javascript:``, ...) is shown as text only."""
    return url if isinstance(url, str) and re.match(r"https?://[^\s\"'<>]+$", url) else None


def _templates_code() -> str:
    """A digest of this module and its templates: a page rendered by other code is rendered again."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    for f in sorted((Path(__file__).parent / "templates").glob("*")):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _run_key(run: Run, site: Site, code: str) -> str:
    """What a run's page is rendered from: the run's own fields, its streams' views (not where a stream's copy
    lies this build, nor the verification a fresh view holds), its sessions, the anchor of its item, the code.

    A view derived from a local stream is named by what it was derived from (its ``key``: the evidence row, the
    file's identity, the trusted keys, the deriving code), which decides all of it, and by its report page; any
    other view by its whole content. Encoding every view's facts was most of an added run's build at 10,000
    runs (issue 36)."""
    item = site.items.get(run.item) if run.item else None
    own = [getattr(run, name) for name in _RUN_OWN]
    streams = [(s.key, s.page, s.report_note) if s.key else _plain(s) for s in run.streams]
    sessions = [_plain(x) for x in run.sessions]
    return _sha256(repr((own, streams, sessions, item.anchor if item else None, code)).encode())


#: A run's fields that are its own (not its streams' or sessions').
_RUN_OWN = tuple(f.name for f in dataclasses.fields(Run) if f.name not in ("streams", "sessions"))


_UNKEYED = frozenset({"local", "verification", "key"})


def _plain(value: Any) -> Any:
    """``value`` as JSON's types: a dataclass as a dict of its fields but ``_UNKEYED`` (``dataclasses.asdict``
    without its deep copies, a tenth of a first build at 1,000 runs)."""
    names = _KEYED.get(type(value))
    if names is None and dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = _KEYED[type(value)] = tuple(f.name for f in dataclasses.fields(value) if f.name not in _UNKEYED)
    if names is not None:
        return {name: _plain(getattr(value, name)) for name in names}
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


#: Each dataclass's fields that a page's key covers (``_plain``), by its type.
_KEYED: dict[type, tuple[str, ...]] = {}


def _render(site: Site, previous: _Previous | None = None) -> tuple[dict[str, _Page], dict[str, str]]:
    """The index and a page per run, and each run page's key; a run page the site in the folder holds, rendered
    from the same key and unchanged since (``_Previous.kept``), is kept as it is, not rendered again."""
    env = _environment()
    css = (Path(__file__).parent / "templates" / "site.css").read_text(encoding="utf-8")
    pages: dict[str, _Page] = {}
    keys: dict[str, str] = {}
    code = _templates_code()
    common = {"site": site, "css": css}
    run_keys: dict[str, str] = {}
    for run in site.runs:
        key = run_keys[run.id] = _run_key(run, site, code)
        page: _Page | None = previous.kept(run.page, key) if previous else None
        if page is None:
            page = env.get_template("site_run.html.j2").render(root="../", run=run, **common).encode()
        pages[run.page], keys[run.page] = page, key
    chunks = run_pages(len(site.runs))
    older = [(k, run_page_name(k)) for k in range(1, len(chunks))]
    for k, (start, stop) in enumerate(chunks[:-1], start=1):
        name, runs = run_page_name(k), site.runs[start:stop]
        newer = run_page_name(k + 1) if k + 1 < len(chunks) else "index.html"
        older_page = run_page_name(k - 1) if k > 1 else None
        key = _sha256(json.dumps([[run_keys[r.id] for r in runs], k, newer, RUNS_PER_PAGE, code]).encode())
        page = previous.kept(name, key) if previous else None
        if page is None:
            page = (
                env.get_template("site_runs_page.html.j2")
                .render(
                    root="",
                    runs=runs,
                    number=k,
                    first=start + 1,
                    last=stop,
                    newer=newer,
                    older=older_page,
                    page_size=RUNS_PER_PAGE,
                    **common,
                )
                .encode()
            )
        pages[name], keys[name] = page, key
    start, stop = chunks[-1]
    index = env.get_template("site_index.html.j2")
    page_runs = site.runs[start:stop]
    text = index.render(root="", page_runs=page_runs, older=older, page_size=RUNS_PER_PAGE, **common)
    pages["index.html"] = text.encode()
    return pages, keys


def run_pages(n: int, size: int | None = None) -> list[tuple[int, int]]:
    """The runs' pages, as (start, stop) over the runs in start order: full pages of ``size`` numbered from the
    oldest, then the newest runs (1 to ``size`` of them; none when there is no run), which ``index.html`` shows.
    Numbered from the oldest, a page holds the same runs as more are added: an added run changes ``index.html``,
    and when it fills the newest page, that page's file and the one before it (its link to newer runs)."""
    size = size or RUNS_PER_PAGE
    full = max(0, (n - 1) // size)
    return [(k * size, (k + 1) * size) for k in range(full)] + [(full * size, n)]


def run_page_name(k: int) -> str:
    """The file of the runs' page ``k`` (1: the oldest runs)."""
    return f"index-{k}.html"


def _report_code() -> str:
    """A digest of the code that makes a report page (``observe.report``'s modules and templates): a page made
    by other code is made again."""
    import observe.report

    root = Path(observe.report.__file__).parent
    h = hashlib.sha256()
    for f in sorted([*root.glob("*.py"), *(root / "templates").glob("*")]):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _report_key(file_digest: str, name: str, back: tuple[str, str], code: str) -> str:
    """What a stream's report page is made from: the stream's bytes (its BLAKE3), the file name the page
    shows, its link back, the code."""
    if _JSON_PLAIN.fullmatch(f"{file_digest}{name}{back[0]}{back[1]}{code}"):  # json.dumps, without its call
        text = f'["{file_digest}", "{name}", ["{back[0]}", "{back[1]}"], "{code}"]'
    else:
        text = json.dumps([file_digest, name, list(back), code])
    return hashlib.sha256(text.encode()).hexdigest()


#: A string that JSON writes as itself between quotes (printable ASCII, no quote, no backslash).
_JSON_PLAIN = re.compile(r"[ !#-\[\]-~]*")


def _json_str(text: str) -> str:
    """``json.dumps(text)``, without its call for the plain strings a site is made of (80,000 calls in an added
    run's build at 10,000 runs: its manifest and its reports' keys)."""
    return f'"{text}"' if _JSON_PLAIN.fullmatch(text) else json.dumps(text)


def _manifest_text(manifest: Mapping[str, Any]) -> bytes:
    """``json.dumps(manifest, indent=1)`` and a newline, for a manifest of strings, numbers and dicts of strings:
    with an indent ``json`` encodes in Python, a third of a second at 20,000 pages."""
    lines = ["{"]
    for n, (name, value) in enumerate(manifest.items()):
        end = "," if n + 1 < len(manifest) else ""
        if isinstance(value, dict) and value:
            lines.append(f" {_json_str(name)}: {{")
            if _JSON_PLAIN.fullmatch("".join([*value, *value.values()])):  # one look at 40,000 plain strings
                lines.append(",\n".join([f'  "{k}": "{v}"' for k, v in value.items()]))
            else:
                lines.append(",\n".join(f"  {_json_str(k)}: {_json_str(v)}" for k, v in value.items()))
            lines.append(f" }}{end}")
        else:
            lines.append(f" {_json_str(name)}: {json.dumps(value)}{end}")
    return ("\n".join(lines) + "\n}\n").encode()


def _write_reports(site: Site, tmp: Path, previous: _Previous | None = None) -> tuple[dict[str, _Page], dict[str, str]]:
    """A report page per available stream, made by ``observe.report.write.write_report``, and each page's key.

    A page the site in the folder already holds, made from the same key (the manifest's ``made``) and still
    the bytes the manifest lists, is kept as it is, not made again (``_Previous.kept``): making a report reads
    the whole stream and is most of a site's cost (issue 36)."""
    from observe.report.write import write_report

    pages: dict[str, _Page] = {}
    keys: dict[str, str] = {}
    code = _report_code()
    runs = site.runs_by_id
    for s in site.streams:
        if s.local is None or s.facts is None:
            continue
        run = runs.get(s.run_id)
        # Named by the id the verified stream holds (the row's may have been edited to anything).
        page = f"streams/{_safe(s.facts.stream_id)}.html"
        back = (f"../{run.page}", f"run {run.id}") if run else ("../index.html", "the tracker")
        key = _report_key(s.facts.file_digest, s.local.name, back, code)
        kept = previous.kept(page, key) if previous else None
        if kept is not None:
            pages[page], keys[page] = kept, key
            s.page = page
            continue
        out = tmp / f"report-{s.evidence_id}.html"
        v = s.facts.verification  # this build's verification of the same file (derive): not made again
        facts = write_report(s.local, out, back_link=back, verification=v if v and not v.signature_checked else None)
        if facts.stream_id != s.facts.stream_id:  # pragma: no cover - derive() read the same bytes
            s.report_note = f"no report page: the report read stream {facts.stream_id}"
            continue
        # Left in ``tmp`` until the site is written: a first build held every report in memory (461 MB at
        # 10,000 runs).
        pages[page], keys[page] = _Spooled(out, _sha256(out.read_bytes())), key
        s.page = page
    return pages, keys


@dataclass(frozen=True)
class _Kept:
    """A page the site holds, made from the same key and still the bytes its manifest lists (``sha256``): kept
    as it is, neither made again nor held in memory."""

    sha256: str


@dataclass(frozen=True)
class _Spooled:
    """A page made in the build's temporary folder (``path``), with its SHA-256: read when it is written."""

    path: Path
    sha256: str


#: A page as a build holds it: its bytes, kept as the site holds it, or made in a file.
_Page = bytes | _Kept | _Spooled

#: A page's file as this user's memo of pages holds it: its SHA-256, device, inode, size, modification and
#: change time, in one line of text.
_Identity = str


@dataclass
class _Previous:
    """The site a build finds in its folder: the files its manifest lists (``files``: path -> SHA-256), what each
    report and run page was made from (``made``), and this user's memo of the pages (``seen``: path -> the
    file's identity when it last held the bytes listed; ``site-pages`` in the user's cache).

    A page whose file has the identity ``seen`` holds is not read again to learn that it is unchanged: reading
    and hashing every page was a quarter of an added run's build at 10,000 runs (issue 36). A page written,
    renamed or ``chmod``ed since has another change time, so it misses and is read and hashed again."""

    root: Path
    files: dict[str, str]
    made: dict[str, str]
    seen: dict[str, _Identity]
    _dirs: dict[str, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._top = os.fspath(self.root)  # joined to 20,000 pages a build: not converted each time

    def kept(self, page: str, key: str) -> _Kept | None:
        """``page`` as the site holds it, when made from ``key`` and unchanged since; else None."""
        listed = self.files.get(page)
        if listed is None or self.made.get(page) != key:
            return None
        ident = self.identity(page, listed)
        if ident is None:
            return None
        if self.seen.get(page) == ident:
            return _Kept(listed)
        try:  # read after the stat: a write between the two leaves a later change time than the one kept
            data = _read_page(os.path.join(self._top, page))
        except OSError:
            return None
        if _sha256(data) != listed:
            return None
        self.seen[page] = ident
        return _Kept(listed)

    def identity(self, page: str, sha256: str) -> _Identity | None:
        """The identity of ``page``'s file holding ``sha256``: a plain file of ours (no ``..``, no symlink on the
        way, ``_inside``'s rule, with each folder checked once a build); None otherwise."""
        parts = page.split("/")
        if not _PAGE.fullmatch(page) and (
            not page or page.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in page
        ):
            return None
        for k in range(1, len(parts)):
            folder = "/".join(parts[:k])
            if folder not in self._dirs:
                try:
                    self._dirs[folder] = stat.S_ISDIR(os.lstat(os.path.join(self._top, folder)).st_mode)
                except OSError:
                    self._dirs[folder] = False
            if not self._dirs[folder]:
                return None
        try:
            st = os.lstat(os.path.join(self._top, page))
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return f"{sha256} {st.st_dev} {st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}"


#: A page's path as the site names its pages (``_inside``'s rule holds for it without looking at each part).
_PAGE = re.compile(r"(?:(?:runs|streams)/)?[0-9A-Za-z_-]+\.html")


def _read_page(path: str) -> bytes:
    """A page's bytes, read to learn whether it is still the one the manifest lists."""
    with open(path, "rb") as f:
        return f.read()


def _pages_memo_path(root: Path) -> Path:
    """This user's memo of the pages of the site in ``root`` (``observe.util.cache``)."""
    from observe.util.cache import cache_folder

    return cache_folder("site-pages") / f"{hashlib.sha256(os.fsencode(os.path.abspath(root))).hexdigest()[:32]}.json"


def _read_memo(path: Path) -> tuple[dict[str, Any], int]:
    """One of this user's memos of the site (``site-checked``, ``site-pages``) and its count of lines: a line per
    entry, its key, a tab and its value (a later line for the same key replaces it; an empty value removes it),
    kept as text until a build asks for that key (``_restore``). An empty memo when it is not there; the count
    is -1 when a line is not one (a torn line, another format): the memo is then written again whole."""
    memo: dict[str, Any] = {}
    lines = 0
    with contextlib.suppress(OSError, UnicodeDecodeError):
        for line in path.read_text(encoding="utf-8").splitlines():
            key, tab, entry = line.partition("\t")
            lines = lines + 1 if tab and lines >= 0 else -1
            if tab and entry:
                memo[key] = entry
            else:
                memo.pop(key, None)
    return memo, lines


def _write_memo(path: Path, memo: Mapping[str, Any], before: Mapping[str, Any], lines: int) -> None:
    """Bring the memo at ``path`` (``before``, read from ``lines`` lines) to ``memo``: the entries that came or
    changed, and an empty line for each that went, appended (an added run's build at 10,000 runs rewrote two
    memos of 10,000 and 20,000 entries to add three); the whole memo written again when it would grow past twice
    its entries or when a line of it was not one (``lines`` -1). A torn last line (a build killed while
    appending) is no entry, or one that does not parse: derived or read again. One that cannot be written is
    left: the next build reads more again."""

    def text(v: Any) -> str:
        return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))

    changed = [f"{k}\t{text(v)}\n" for k, v in memo.items() if v is not before.get(k) and v != before.get(k)]
    changed += [f"{k}\t\n" for k in before.keys() - memo.keys()]
    if not changed:
        return
    with contextlib.suppress(OSError, ValueError):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if lines < 0 or lines + len(changed) > 2 * len(memo) + 64 or not path.is_file():
            replace_file(path, "".join(f"{k}\t{text(v)}\n" for k, v in memo.items()).encode(), mode=0o600)
            return
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.write(fd, "".join(changed).encode())
        finally:
            os.close(fd)


# -- writing the folder ------------------------------------------------------------------------------


@dataclass
class SiteResult:
    """What ``write_site`` did."""

    directory: Path
    site: Site
    files: list[str]
    written: list[str]
    unchanged: list[str]
    removed: list[str]
    kept: list[str]

    def summary(self) -> str:
        s = self.site
        reports = sum(1 for f in self.files if f.startswith("streams/"))
        states = ", ".join(
            f"{s.stream_count(k)} {k}" for k in ("proven", "disagrees", "damaged", "missing") if s.stream_count(k)
        )
        kept = f"; kept {len(self.kept)} edited by hand" if self.kept else ""
        return (
            f"site {self.directory}: index.html, {count(len(s.runs), 'run page')}, {count(reports, 'stream report')}"
            f" ({len(self.written)} written, {len(self.unchanged)} unchanged, {len(self.removed)} removed{kept});"
            f" streams: {states or 'none attached'}"
        )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _inside(root: Path, rel: str) -> Path | None:
    """``root/rel`` for a plain relative path of ours (no ``..``, no absolute path, no symlink on the way)."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in rel:
        return None
    path = root
    for p in parts:
        path = path / p
        if path.is_symlink():
            return None
    return path


def _read_manifest(root: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The files a previous run wrote, and its ``made``: each report and run page's key (what it was made from;
    none when it has none); refuses a folder that is not empty and not a site of ours."""
    if root.exists() and not root.is_dir():
        raise TrackerSiteDir(f"{root} is not a folder")
    if not root.exists():
        return {}, {}
    manifest = root / MANIFEST
    if not manifest.is_file() or manifest.is_symlink():
        # Not empty: only what a build of ours that was stopped before its manifest left is taken
        # (``_commit`` checks each file is a page it writes, byte for byte), nothing else.
        return {}, {}
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise TrackerSiteDir(f"{manifest} cannot be read as a site's manifest: {exc}") from exc
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("generator") != GENERATOR or not isinstance(files, dict):
        raise TrackerSiteDir(f"{manifest} is not the manifest of a site written by `{GENERATOR}`")
    made = data.get("made")
    made = {str(k): str(v) for k, v in made.items()} if isinstance(made, dict) else {}
    return {str(k): str(v) for k, v in files.items()}, made


def _page_bytes(page: _Page) -> bytes | None:
    """A page's bytes as this build writes them (None for one kept as the site holds it)."""
    if isinstance(page, _Kept):
        return None
    return page.path.read_bytes() if isinstance(page, _Spooled) else page


def _holds(path: Path, page: _Page) -> bool:
    """Whether ``path`` is a plain file holding exactly ``page``'s bytes."""
    data = _page_bytes(page)
    try:
        return data is not None and path.is_file() and not path.is_symlink() and path.read_bytes() == data
    except OSError:
        return False


def _stopped_build(root: Path, pages: Mapping[str, _Page]) -> None:
    """Refuse a folder without our manifest unless every file in it is a page of this build, byte for byte:
    what a build of ours stopped (Ctrl-C) before it wrote its manifest leaves, and nothing else."""
    for folder, dirs, names in os.walk(root):
        for name in (*names, *(d for d in dirs if os.path.islink(os.path.join(folder, d)))):
            rel = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
            if rel not in pages or not _holds(root / rel, pages[rel]):
                raise TrackerSiteDir(
                    f"{root} is not empty and is not a site written by `{GENERATOR}` (no {MANIFEST}): name an"
                    " empty or new folder"
                )


def write_site(conn: Connection, directory: str | os.PathLike[str]) -> SiteResult:
    """Write (or bring up to date) the tracker's site in ``directory``; see the module's docstring."""
    root = Path(directory)
    old, made = _read_manifest(root)
    memo_path, pages_path = _memo_path(root), _pages_memo_path(root)
    memo, memo_lines = _read_memo(memo_path)
    before = dict(memo)
    seen, seen_lines = _read_memo(pages_path) if old else ({}, 0)
    previous = _Previous(root, old, made, seen) if old else None
    seen_before = dict(seen)
    with tempfile.TemporaryDirectory(prefix="alpha-site-") as tmp:
        site = build_site(conn, Path(tmp), memo)
        reports, keys = _write_reports(site, Path(tmp), previous)
        rendered, run_keys = _render(site, previous)
        pages = rendered | reports
        result = _commit(root, site, pages, old, keys | run_keys, seen)
    _write_memo(memo_path, memo, before, memo_lines)
    _write_memo(pages_path, seen, seen_before, seen_lines)
    return result


def _commit(
    root: Path,
    site: Site,
    pages: Mapping[str, _Page],
    old: dict[str, str],
    keys: Mapping[str, str] | None = None,
    seen: dict[str, _Identity] | None = None,
) -> SiteResult:
    """Write the pages that changed, remove those that no longer belong, write the manifest; ``seen`` (this
    user's memo of the pages, ``_Previous``) is brought up to date with every file written or read."""
    seen = {} if seen is None else seen
    ours = _Previous(root, {}, {}, {})
    order = sorted(pages)
    if not (root / MANIFEST).is_file() and root.is_dir() and any(root.iterdir()):
        _stopped_build(root, pages)
    # Nothing is written over a file the site did not write; a file a build of ours stopped before its
    # manifest wrote holds exactly the page (else it is someone's).
    for rel in order:
        if rel in old:
            continue
        path = root / rel
        if path.is_symlink() or (path.exists() and not _holds(path, pages[rel])):
            raise TrackerSiteDir(f"{path} exists and was not written by `{GENERATOR}`: it is left as it is")
    root.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    unchanged: list[str] = []
    files: dict[str, str] = {}  # in path order, as the manifest lists them
    for rel in order:
        data = pages[rel]
        if isinstance(data, _Kept):
            files[rel] = data.sha256
            unchanged.append(rel)
            continue
        path = root / rel
        if isinstance(data, _Spooled):
            files[rel], data = data.sha256, data.path.read_bytes()
        else:
            files[rel] = _sha256(data)
        if rel in old and path.is_file() and not path.is_symlink() and path.read_bytes() == data:
            unchanged.append(rel)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            replace_file(path, data)
            written.append(rel)
        ident = ours.identity(rel, files[rel])
        if ident is not None:
            seen[rel] = ident
    removed: list[str] = []
    kept: list[str] = []
    for rel in sorted(set(old) - set(pages)):
        gone = _inside(root, rel)
        if gone is None or not gone.is_file():
            continue
        if _sha256(gone.read_bytes()) != old[rel]:
            kept.append(rel)  # edited since the site wrote it: no longer only ours to remove
            continue
        gone.unlink()
        removed.append(rel)
        if gone.parent != root:
            with contextlib.suppress(OSError):  # a folder the site made, now empty
                gone.parent.rmdir()
    # A page edited by hand since is no longer the site's: it leaves the manifest, and stays.
    for rel in set(seen) - set(files):
        del seen[rel]
    manifest: dict[str, Any] = {"generator": GENERATOR, "format": MANIFEST_FORMAT, "files": files}
    if keys:
        manifest["made"] = {rel: keys[rel] for rel in sorted(keys) if rel in files}
    text = _manifest_text(manifest)
    mpath = root / MANIFEST
    if not mpath.is_file() or mpath.read_bytes() != text:
        mpath.write_bytes(text)
    return SiteResult(root, site, sorted(pages), written, unchanged, removed, kept)
