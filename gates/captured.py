"""``same-bytes``: a comparison of captured files, made by the gate over the bytes, never taken from a receipt.

A lane reports "the resumed checkpoint equals the uninterrupted one" as a
receipt; that is a claim. This check reads the files themselves from the
stream: each ``RECEIPT.FIELD`` in ``files`` names the receipt (the last one of
that name) whose field holds a path, the path names a captured artifact, and
the artifact's SHA-256 is hashed from its captured bytes
(``gates.evidence.Artifact.sha256``). Every file must be the same bytes, and,
with ``sha256``, those bytes must hash to that pinned digest (the oracle's,
written in the gate file, where no receipt can change it; ``sha256_by_roles``
pins the oracle's digest for runs of other role counts, ``{"4" = DIGEST, ...}``,
chosen by the number of owner roles the lane config the recorder captured
(``config_env``) binds, ``sha256`` for two roles, or without such a capture). Each
``RECEIPT.FIELD`` in ``claims`` is a digest a receipt states about those files
(e.g. the plain run's checkpoint digest a host-shadow receipt compares with):
it must be the files' digest, so no stated digest stands unbound to bytes.

- a receipt, field or captured file missing: inconclusive;
- a run of a role count no digest is pinned for: inconclusive;
- different bytes, bytes other than the pinned digest, or a claim other than
  the bytes' digest: fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gates.evidence import Evidence
from gates.lane_roles import captured_config, role_nodes
from gates.typing import Findings, Outcome
from gates.wording import count

__all__ = ["same_bytes"]


def _pinned(ev: Evidence, args: Mapping[str, Any], f: Findings) -> str | None:
    """The pinned digest for the run's role count (the module's docstring); None when none is pinned."""
    pinned = args.get("sha256")
    table = args.get("sha256_by_roles")
    if isinstance(table, Mapping):
        doc = captured_config(ev, args.get("config_env"))
        roles = role_nodes(doc) if doc is not None else None
        if roles is not None and len(roles) > 2:
            pinned = table.get(str(len(roles)))
            if not isinstance(pinned, str):
                f.inconclusive(
                    f"the lane config binds {len(roles)} roles, and the gate pins the oracle's digest only for "
                    f"{', '.join(['2', *sorted(table, key=lambda k: int(k) if str(k).isdigit() else 0)])} roles"
                )
    return pinned.lower() if isinstance(pinned, str) else None


def same_bytes(ev: Evidence, args: Mapping[str, Any]) -> Outcome:
    """Every named captured file holds the same bytes (and the pinned digest, when given)."""
    f = Findings()
    files = [str(x) for x in args.get("files", [])]
    pinned = _pinned(ev, args, f)
    if not files:
        f.inconclusive("no files to compare (args.files is empty)")
        return f.outcome("")
    digests: dict[str, list[str]] = {}
    for ref in files:
        receipt_name, _, field_name = ref.rpartition(".")
        receipts = ev.receipts_named(receipt_name)
        if not receipts:
            f.inconclusive(f"no {receipt_name!r} receipt, so {ref} names no file")
            continue
        r = receipts[-1]
        f.use([r.seq])
        path = r.fields.get(field_name)
        if not isinstance(path, str) or not path:
            f.inconclusive(f"{ref} (seq {r.seq}) names no path")
            continue
        art = ev.artifact(path)
        if art is None:
            f.inconclusive(f"{ref} names {path}, which was not captured")
            continue
        f.use(art.seqs[:1])
        sha, why = art.sha256()
        if sha is None:
            f.inconclusive(f"{ref} names {path}: {why}")
            continue
        digests.setdefault(sha, []).append(f"{ref} ({path})")
    if len(digests) > 1:
        f.fail(
            "the captured files differ: "
            + "; ".join(f"{', '.join(refs)} hash to {sha[:12]}" for sha, refs in digests.items())
        )
    if pinned is not None:
        for sha, refs in digests.items():
            if sha != pinned:
                f.fail(f"{', '.join(refs)} hash to {sha}, not the pinned {pinned}")
    for ref in [str(x) for x in args.get("claims", [])]:
        receipt_name, _, field_name = ref.rpartition(".")
        receipts = ev.receipts_named(receipt_name)
        if not receipts:
            f.inconclusive(f"no {receipt_name!r} receipt, so its claim {ref} cannot be checked")
            continue
        f.use([receipts[-1].seq])
        claim = receipts[-1].fields.get(field_name)
        if not isinstance(claim, str):
            f.inconclusive(f"{ref} (seq {receipts[-1].seq}) states no digest")
        elif digests and claim.lower() not in digests:
            f.fail(f"{ref} (seq {receipts[-1].seq}) says {claim}, but the captured files hash to {', '.join(digests)}")
    shown = next(iter(digests), "")
    return f.outcome(
        f"{count(len(files), 'captured file')}, hashed from their bytes, are the same bytes (sha256 {shown[:12]})"
        + (", the pinned digest" if pinned is not None else "")
    )
