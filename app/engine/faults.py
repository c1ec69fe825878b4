"""Named fault points: a crash test tells a worker process to kill itself with
SIGKILL when it reaches one, to prove the runtime survives a crash exactly
there. Configured by ``Settings.fault_point`` (``REPAIRBOT_FAULT_POINT``) as
``name`` or ``name@N`` (the N-th time the point is reached). Inert otherwise.

Points in the runtime:

- ``activity.before_complete``: the activity's side effect happened, its
  result is not yet recorded;
- ``workflow_task.mid_commit``: inside the commit transaction of a workflow task;
- ``activity.after_heartbeat``: an attempt between two heartbeats.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field


@dataclass
class FaultPoints:
    spec: str = ""
    _hits: dict[str, int] = field(default_factory=dict)

    def hit(self, name: str) -> None:
        if not self.spec:
            return
        target, _, nth = self.spec.partition("@")
        if target != name:
            return
        self._hits[name] = self._hits.get(name, 0) + 1
        if self._hits[name] >= int(nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)
