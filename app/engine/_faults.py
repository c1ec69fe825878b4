"""Named fault points: a crash test tells a worker process to kill itself with
SIGKILL when it reaches one, to prove the runtime survives a crash exactly
there. Configured by ``Settings.fault_point`` (``REPAIRBOT_FAULT_POINT``) as
``name[:detail][@N][+SECONDS]``: the point, optionally only for one activity
(the detail), on the N-th time it is reached (default the first). Inert
otherwise. With ``+SECONDS`` the process stalls there that long instead of
dying (the whole process, as a worker blocked in a slow write would), then
goes on: a crash test opens the window after an external effect and before
its record, and kills the worker inside it itself.

Points in the runtime:

- ``activity.before_complete`` (detail: activity name): the activity's side
  effect happened, its result is not yet recorded;
- ``workflow_task.mid_commit``: inside the commit transaction of a workflow task
  (fused with an activity's completion or not);
- ``workflow_task.after_commit``: a workflow task committed, its jobs not sent;
- ``fused.before_commit``, ``fused.mid_commit``, ``fused.after_commit``: around
  and inside the transaction that commits an activity's completion together
  with the workflow task it wakes (app/engine/_store/fused.py; on PostgreSQL a
  steady step, a run's first task and a run's close are one statement each,
  and ``mid_commit`` is hit just before it);
- ``activity.before_claim``, ``activity.after_claim`` (detail: activity name):
  a job taken, its attempt not claimed yet / claimed, the body not run;
- ``activity.after_heartbeat`` (detail: activity name): an attempt between two
  heartbeats.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field


@dataclass
class FaultPoints:
    spec: str = ""
    _hits: int = 0
    _target: tuple[str, str | None, int] | None = field(default=None, init=False)
    #: Seconds to stall at the point instead of dying (``+SECONDS``).
    _stall: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.spec:
            spec, _, stall = self.spec.partition("+")
            point, _, nth = spec.partition("@")
            name, _, detail = point.partition(":")
            self._target = (name, detail or None, int(nth or 1))
            self._stall = float(stall) if stall else None

    def hit(self, name: str, detail: str | None = None) -> None:
        if self._target is None:
            return
        target, wanted, nth = self._target
        if target != name or (wanted is not None and wanted != detail):
            return
        self._hits += 1
        if self._stall is not None:
            if self._hits == nth:
                time.sleep(self._stall)  # blocks the event loop too, on purpose
        elif self._hits >= nth:
            os.kill(os.getpid(), signal.SIGKILL)
