"""tracker: the progress tracker, where sealed AOS streams are counted as evidence.

One SQLite file holds milestones, work items and their dependencies,
experiments, runs, devices, evidence (attached streams) and measurements. The
rules that keep its status honest are triggers in the database itself
(``tracker/migrations``), so no client can skip them.
"""

from __future__ import annotations
