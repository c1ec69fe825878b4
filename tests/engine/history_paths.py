"""Take a machine's folder out of a recorded history (``tests/histories/``).

A history records what activities returned, and a repository command's
result names the interpreter of the machine that ran it. Replacing that
folder in the results changes the inputs the workflow derives from them, and
so the input hashes recorded with each ``activity_scheduled``: this tool
rewrites the text, then replays the history and takes each hash that now
differs (and nothing else) from the code, until the history replays cleanly.

    python -m tests.engine.history_paths tests/histories/repair_v1_merged.json \
        --old <the recording machine's checkout> --new /srv/repairbot

Any other difference stops it: the history and the code then disagree on more
than a folder, which is a real replay failure.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.engine._errors import NondeterminismError
from app.engine._history import FORMAT
from app.engine._history_commands import RecordedEvent
from app.engine._registry import Registry
from app.engine._replay import WorkflowExecution


def replaced(value: Any, old: str, new: str) -> Any:
    """``value`` with ``old`` replaced by ``new`` in every string it holds."""
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [replaced(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: replaced(v, old, new) for k, v in value.items()}
    return value


def first_difference(history: dict[str, Any], registry: Registry) -> NondeterminismError | None:
    """Where the code first issues a command other than the recorded one."""
    defn = registry.workflow(history["workflow"], int(history["version"]))
    events = [RecordedEvent.from_json(e) for e in history["events"]]
    execution = WorkflowExecution(
        defn, run_id=history["run_id"], workflow_id=history["workflow_id"]
    )
    try:
        execution.apply(events, task_time=datetime.now(UTC))
    finally:
        execution.close()
    return execution._nondeterminism


def rehash(history: dict[str, Any], registry: Registry) -> int:
    """Take every differing input hash from the code; how many were taken."""
    taken = 0
    while (problem := first_difference(history, registry)) is not None:
        expected, actual = dict(problem.expected or {}), dict(problem.actual)
        if {k: v for k, v in expected.items() if k != "input_hash"} != {
            k: v for k, v in actual.items() if k != "input_hash"
        }:
            raise SystemExit(f"more than an input hash differs: {problem}")
        [event] = [
            e
            for e in history["events"]
            if e["type"] == "activity_scheduled" and e["data"].get("cmd") == problem.position
        ]
        event["data"]["input_hash"] = actual["input_hash"]
        taken += 1
    return taken


def main() -> None:
    from tests.engine.test_replay_harness import current_registry

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("histories", nargs="+", type=Path)
    parser.add_argument("--old", required=True, help="the folder to take out")
    parser.add_argument("--new", default="/srv/repairbot", help="what stands in its place")
    args = parser.parse_args()
    registry = current_registry()
    for path in args.histories:
        history = json.loads(path.read_text())
        if history.get("format") != FORMAT:
            raise SystemExit(f"{path}: not a {FORMAT} document")
        history["events"] = replaced(history["events"], args.old, args.new)
        taken = rehash(history, registry)
        path.write_text(json.dumps(history, indent=1) + "\n")
        print(f"{path}: {taken} input hash(es) taken from the code")


if __name__ == "__main__":
    main()
