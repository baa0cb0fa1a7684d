"""lanekit: a real, small two-owner learner that walks the physical qualification sequence.

Runtime modules (embedded in every role executable): ``spec``, ``numeric``,
``learner``, ``wire``, ``device``, ``checkpoint``, ``refusals``, ``role``.
Driver-side modules (never embedded): ``build``, ``session``, ``receipts``,
``config``, ``preflight``, ``phases``, ``placement`` (this machine or nodes),
``remote`` (the driver's SSH connections), ``remote_run`` (a run on nodes),
``__main__``. The oracle lives outside the package
(``samples/lane/oracle.py``) so that it shares no code with the learner.
"""

from __future__ import annotations

__all__: list[str] = []
