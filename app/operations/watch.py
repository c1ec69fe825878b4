"""``repairbot runs watch ID``: a run's progress, live, in the terminal.

Reads the database (the only source of truth) every ``interval`` seconds and
prints what changed: status and phase as they move, each new history event,
each activity attempt as it starts and ends. Returns when the run closes (or
when a continued-as-new run hands over, it follows the next one).

Every line carries the time the database recorded, not the time it was
printed: watching a run that ended yesterday shows when things happened.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from typing import Any, TextIO

from sqlalchemy import Engine, select

from app.engine import CLOSED_STATUSES, HistoryEvent, RuntimeClient
from app.operations.runs_view import live_state

_EVENTS = HistoryEvent.__table__  # type: ignore[attr-defined]


def _clock(ts: float | None) -> str:
    """A recorded time as ``HH:MM:SS`` (UTC); ``--:--:--`` when none is recorded."""
    if ts is None:
        return "--:--:--"
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S")


def _event_times(engine: Engine, run_id: str, after: int) -> dict[int, float]:
    """When each history event after ``after`` was recorded, by position."""
    query = select(_EVENTS.c.seq, _EVENTS.c.created_at).where(
        _EVENTS.c.run_id == run_id, _EVENTS.c.seq > after
    )
    with engine.connect() as conn:
        return {row.seq: row.created_at for row in conn.execute(query)}


def _event_line(event: Any) -> str:
    data = event.data or {}
    if event.type == "activity_scheduled":
        return f"scheduled {data.get('activity')} ({data.get('operation_id', '').split(':')[-1]})"
    if event.type in ("activity_completed", "activity_failed"):
        extra = (
            f": {data.get('failure_class')} {data.get('message', '')[:80]}"
            if (event.type == "activity_failed")
            else ""
        )
        return f"{event.type.removeprefix('activity_')} {data.get('activity', '')}{extra}"
    if event.type == "signal_received":
        return f"signal {data.get('name')}"
    short = json.dumps({k: v for k, v in data.items() if k != "input_hash"}, default=str)
    return f"{event.type} {short[:100]}"


def watch(
    runtime: RuntimeClient,
    key: str,
    *,
    interval: float = 0.5,
    out: TextIO | None = None,
    timeout: float | None = None,
) -> int:
    """Follow run ``key`` (run id or workflow id) until it closes; 0 when it
    completed, 1 otherwise (2 when there is no such run)."""
    out = out or sys.stdout  # read now: sys.stdout may have been replaced since import
    run = runtime.store.find_run(key)
    if run is None:
        print(f"no run or workflow id {key!r}", file=sys.stderr)
        return 2
    began = datetime.fromtimestamp(run.created_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    print(
        f"watching {run.run_id} ({run.workflow_name}@{run.workflow_version}), started {began}",
        file=out,
    )
    seen_events = 0
    shown: tuple[str, str] | None = None
    attempts_seen: dict[tuple[str, int], str] = {}
    started = time.monotonic()
    last_time: float | None = run.created_at
    while True:
        run = runtime.store.load_run(run.run_id)
        assert run is not None
        if run.history_length != seen_events or shown is None:
            times = _event_times(runtime.store.engine, run.run_id, seen_events)
            for event in runtime.store.load_events(run.run_id, after=seen_events):
                last_time = times.get(event.seq)
                print(f"{_clock(last_time)}  {event.seq:>4}  {_event_line(event)}", file=out)
            seen_events = run.history_length
            state = live_state(runtime, run)
            phase = run.cancel_phase or str(state.get("phase") or "")
            if (run.status, phase) != shown:
                shown = (run.status, phase)
                detail = f"  {state['detail']}" if state.get("detail") else ""
                print(
                    f"{_clock(last_time)}  ==>  status {run.status}"
                    + (f", phase {phase}" if phase else "")
                    + detail,
                    file=out,
                )
        for a in runtime.store.activity_attempts(run.run_id):
            marker = (a["operation_id"], a["attempt"])
            outcome = a["outcome"] or "running"
            if attempts_seen.get(marker) != outcome:
                attempts_seen[marker] = outcome
                when = a["finished_at"] if a["outcome"] else a["started_at"]
                print(
                    f"{_clock(when)}        attempt {a['attempt']} of "
                    f"{a['operation_id'].split(':')[-1]} on {a['worker_id']}: {outcome}",
                    file=out,
                )
        out.flush()
        if run.status in CLOSED_STATUSES:
            if run.status == "continued-as-new":
                following = runtime.store.find_run(run.workflow_id)
                if following is not None and following.run_id != run.run_id:
                    print(f"{_clock(run.closed_at)}  continued as {following.run_id}", file=out)
                    run, seen_events, shown = following, 0, None
                    continue
            result = run.result if isinstance(run.result, dict) else {}
            outcome = result.get("outcome") or run.status
            print(f"{_clock(run.closed_at)}  run {run.status}: {outcome}", file=out)
            return 0 if run.status == "completed" else 1
        if timeout is not None and time.monotonic() - started > timeout:
            print(
                f"{_clock(time.time())}  still {run.status} after {timeout:.0f}s; stopped watching",
                file=out,
            )
            return 1
        time.sleep(interval)
