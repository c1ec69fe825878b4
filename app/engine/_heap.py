"""Keep the garbage collector's full passes off the event loop's critical path.

A worker imports a great deal that lives as long as the process: githubkit's
models, SQLAlchemy's metadata and compiled-statement cache, pydantic's
validators, the registry. CPython's cyclic collector walks every tracked
object on a full (generation 2) pass, and that pass runs on whichever thread
happens to allocate, usually the event loop's. Measured with
``python -m bench.loop_lag`` (200 concurrent runs on PostgreSQL), the longest
event-loop stalls, 86 to 155 ms, were exactly these passes; everything else
stayed under 40 ms.

:func:`freeze_startup_heap` moves everything alive once start-up is over into
the collector's permanent generation (``gc.freeze``), so later full passes
walk only what the work itself allocated. Objects frozen are never collected;
that is the point, and start-up garbage is collected first so that nothing
unreachable is frozen with them. Call it once per process, from the
composition root, after the process has built its long-lived objects and
before it takes work.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("repairbot.heap")


def freeze_startup_heap() -> int:
    """Collect start-up garbage, then exempt what survived from full passes.

    Returns how many objects the permanent generation now holds.
    """
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.debug("froze %d start-up objects out of the collector's full passes", frozen)
    return frozen
