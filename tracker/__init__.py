"""tracker: the progress tracker, where sealed AOS streams are counted as evidence.

One SQLite file holds milestones, work items and their dependencies,
experiments, runs (text ids, :mod:`tracker.ids`), devices, evidence (attached
streams) and measurements. The rules that keep its status honest are triggers in
the database itself (``tracker/migrations``), so no client can skip them; every
change made through the tool is journalled (:mod:`tracker.journal`), and
:mod:`tracker.audit` names any row, trigger or stream that differs from what the
tool wrote.
"""

from __future__ import annotations
