"""Jobs: what the dispatch channel carries. The database decides what is due;
a job only says "look at this now".

Job ids are deterministic, so relaying the same job twice yields one job. A
re-dispatch of work a crash may have left locked in the channel gets a fresh
id instead (``<id>~<relay>``, the relay number kept on the outbox row): arq
refuses an id whose job key or in-progress key survived the crashed worker,
so reusing the id would stall the work for arq's whole job expiry."""

from __future__ import annotations

from dataclasses import dataclass

WORKFLOW_TASK = "workflow_task"
ACTIVITY = "activity"
TIMER = "timer"
#: Not work: asks the channel to drop a delayed job that is no longer needed
#: (a cancelled timer, a closed run's retry). Losing one is harmless: the job
#: would find nothing to do.
RETRACT = "retract"
DEFAULT_QUEUE = "repairbot:default"
#: How the ids of the engine's own jobs begin (a re-dispatch appends ``~<n>``);
#: anything else in a queue (arq's cron jobs) is arq's to run.
ENGINE_JOB_PREFIXES = ("wft:", "act:", "tmr:")


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
    #: Activity jobs: the activity's name, so a worker can tell whether it has
    #: the code to run it eagerly (not stored: a relayed job lacks it).
    activity: str | None = None


def workflow_task_job(run_id: str, seq: int, queue: str, not_before: float = 0.0) -> Job:
    return Job(f"wft:{run_id}:{seq}", WORKFLOW_TASK, run_id, queue, not_before)


def activity_job(
    task_id: int, attempt: int, not_before: float = 0.0, *, activity: str | None = None
) -> Job:
    return Job(
        f"act:{task_id}:{attempt}", ACTIVITY, str(task_id), DEFAULT_QUEUE, not_before, activity
    )


def timer_job(run_id: str, cmd: int, fire_at: float) -> Job:
    return Job(f"tmr:{run_id}:{cmd}", TIMER, f"{run_id}|{cmd}", DEFAULT_QUEUE, fire_at)


def is_engine_job(job_id: str) -> bool:
    return job_id.startswith(ENGINE_JOB_PREFIXES)


def relayed_id(job_id: str, relay: int) -> str:
    """The id of the ``relay``-th re-dispatch of a job (0 is the first dispatch)."""
    return job_id if relay == 0 else f"{job_id}~{relay}"


def retractions(job_id: str, queue: str, relays: int) -> list[Job]:
    """Retract every id a job was dispatched under."""
    return [Job(relayed_id(job_id, n), RETRACT, job_id, queue) for n in range(relays + 1)]
