"""Jobs: what the dispatch channel carries. The database decides what is due;
a job only says "look at this now". Job ids are deterministic, so relaying
the same job twice yields one job."""

from __future__ import annotations

from dataclasses import dataclass

WORKFLOW_TASK = "workflow_task"
ACTIVITY = "activity"
TIMER = "timer"
DEFAULT_QUEUE = "repairbot:default"


def workflow_queue(name: str, version: int) -> str:
    """Workflow tasks go to a queue per workflow version: a worker takes only
    the versions it has code for."""
    return f"repairbot:wf:{name}@{version}"


@dataclass(frozen=True)
class Job:
    job_id: str
    kind: str
    ref: str
    queue: str
    not_before: float = 0.0


def workflow_task_job(run_id: str, seq: int, queue: str, not_before: float = 0.0) -> Job:
    return Job(f"wft:{run_id}:{seq}", WORKFLOW_TASK, run_id, queue, not_before)


def activity_job(task_id: int, attempt: int, not_before: float = 0.0) -> Job:
    return Job(f"act:{task_id}:{attempt}", ACTIVITY, str(task_id), DEFAULT_QUEUE, not_before)


def timer_job(run_id: str, cmd: int, fire_at: float) -> Job:
    return Job(f"tmr:{run_id}:{cmd}", TIMER, f"{run_id}|{cmd}", DEFAULT_QUEUE, fire_at)
