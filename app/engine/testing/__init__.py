"""A workflow test kit: real workflows, fake activities, a clock the test turns.

``WorkflowEnvironment`` runs the real engine (store, worker, reconciler,
replay) in-process on a SQLite file, with a :class:`ManualClock` injected
into the runtime: a durable timer, a retry back-off or a review deadline
falls due when the test calls ``await env.advance(seconds)``, not after
waiting. Activities are :class:`FakeActivities` registered under the real
names with the real policies; each call is recorded with its input.
:class:`Replayer` replays a recorded history (``tests/histories/``) against
the current code and says where it diverges.

See docs/developing.md for how to use it.
"""

from app.engine.testing.clock import ManualClock
from app.engine.testing.environment import RunStuck, WorkflowEnvironment
from app.engine.testing.fakes import Call, FakeActivities, UnexpectedActivity
from app.engine.testing.replayer import Divergence, Replayer

__all__ = [
    "Call",
    "Divergence",
    "FakeActivities",
    "ManualClock",
    "Replayer",
    "RunStuck",
    "UnexpectedActivity",
    "WorkflowEnvironment",
]
