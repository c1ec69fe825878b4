"""The fused step: an activity's completion and the workflow task it wakes,
committed together.

The usual path takes three write transactions per step: the activity's
completion (which marks a workflow task due and writes its job), the workflow
task's commit (which schedules the next activity and writes its job), and
the next activity's claim. When the worker that finished the activity holds
the run's execution in its cache, it applies ``activity_completed`` in memory
and hands the store the completion and the resulting commands at once; the
store writes them in one transaction, under both guards:

- the fencing token: the completion is accepted only from the current
  attempt (a stale one is rejected and counted, as ``complete_activity``
  does);
- the history length: the run's history must still be the one the cached
  execution replayed. If it moved (a signal, a cancel, another completion),
  the whole transaction is rolled back and the caller completes the
  activity the usual way.

The next activity may be claimed in the same commit (``EagerOffer``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import select

from app.engine._errors import StaleLease
from app.engine._history_commands import RecordedEvent
from app.engine._jobs import Job
from app.engine._replay import WorkflowTaskResult
from app.engine._store.activities import ActivityAttempts
from app.engine._store.closing import closing_outcome
from app.engine._store.eager import EagerOffer
from app.engine._store.one_statement import Completion, steady_schedule
from app.engine._store.rows import Claim, RunRow
from app.engine._store.schema import tasks
from app.engine._store.statements import TASK_BY_OPERATION
from app.engine._store.workflow_tasks import WorkflowTasks


@dataclass(frozen=True)
class Continued:
    """A fused commit's result: the jobs to hand on, and the next activity's
    attempt when the commit claimed it for this worker."""

    jobs: list[Job]
    claimed: Claim | None


class _HistoryMoved(Exception):
    """Raised inside the fused transaction to roll all of it back."""


class FusedSteps(WorkflowTasks, ActivityAttempts):
    def complete_and_continue(
        self,
        claim: Claim,
        result: Any,
        run: RunRow,
        completed: RecordedEvent,
        step: WorkflowTaskResult,
        *,
        offer: EagerOffer | None = None,
    ) -> Continued | None:
        """Accept ``claim``'s ``result`` and commit ``step``, the workflow task
        that applied ``completed`` (at ``run.history_length + 1``) to the
        cached execution, in one transaction. None, with nothing written, when
        the run's history is no longer ``run.history_length``. Raises
        :class:`StaleLease` when ``claim``'s token is not current."""
        if self.engine.dialect.name == "postgresql":
            continued = self._in_one_statement(claim, result, run, completed, step, offer)
            if continued is not None:
                return continued
            # Not a step that fits one statement, or a stale token, a moved
            # history or a taken operation id: nothing was written, and the
            # transaction below handles each as ever.
        stale = False
        jobs: list[Job] = []
        try:
            with self.transaction() as tx:
                if self._accept_result(tx, claim.task_id, claim.token, result, "completed") is None:
                    stale = True
                else:
                    tx.defer_event(run.run_id, completed.seq, completed.type, completed.data)
                    after = replace(run, history_length=completed.seq)
                    # No workflow-task job of this run can be left to drop:
                    # the run's last commit that was not fused dropped them, a
                    # fused one writes none, and every writer of one since
                    # (an event from outside, a start, the reconciler for a
                    # run such an event marked pending) moved history, which
                    # the guard catches.
                    if not self._write_step(
                        tx,
                        after,
                        step,
                        expected=run.history_length,
                        offer=offer,
                        jobs_to_drop=False,
                    ):
                        raise _HistoryMoved
                    self.faults.hit("fused.mid_commit")
                    self.faults.hit("workflow_task.mid_commit")
                    jobs = tx.jobs
        except _HistoryMoved:
            return None
        if stale:
            raise StaleLease(
                f"activity task {claim.task_id}: completion with stale token {claim.token}"
            )
        return Continued(jobs, offer.taken if offer is not None else None)

    def _in_one_statement(
        self,
        claim: Claim,
        result: Any,
        run: RunRow,
        completed: RecordedEvent,
        step: WorkflowTaskResult,
        offer: EagerOffer | None,
    ) -> Continued | None:
        """A steady step or a run's close as one statement (PostgreSQL); None,
        with nothing written, for any other step or when it could not be
        written so."""
        steady = steady_schedule(step)
        if steady is not None:
            completion = Completion(claim, result, completed)
            jobs = self._schedule_in_one_statement(run, steady, offer, completion)
        else:
            closing = closing_outcome(step)
            if closing is None:
                return None
            jobs = self._close_after_result(claim, result, run, completed, closing)
        if jobs is None:
            return None
        return Continued(jobs, offer.taken if offer is not None else None)

    def fused_outcome(
        self, claim: Claim, worker_id: str, eager_operation: str | None
    ) -> tuple[bool, int | None]:
        """After a fused commit whose outcome was lost: whether it committed
        (the task is completed under this attempt's token), and the task it
        claimed eagerly for ``worker_id`` (by ``eager_operation``) if that
        attempt is still running under token 1: nobody runs it, so the caller
        releases it rather than leave it to its lease."""
        with self.reading() as conn:
            done = conn.execute(
                select(tasks.c.id).where(
                    tasks.c.id == claim.task_id,
                    tasks.c.fencing_token == claim.token,
                    tasks.c.status == "completed",
                )
            ).first()
        if done is None or eager_operation is None:
            return done is not None, None
        return True, self.orphaned_eager_claim(eager_operation, worker_id)

    def orphaned_eager_claim(self, eager_operation: str, worker_id: str) -> int | None:
        """The task of ``eager_operation`` if a commit claimed it eagerly for
        ``worker_id`` and that attempt (token 1) is still running: after the
        commit's outcome was lost nobody runs it, so the caller releases it
        rather than leave it to its lease."""
        with self.reading() as conn:
            row = conn.execute(TASK_BY_OPERATION, {"p_operation": eager_operation}).first()
        held = (
            row is not None
            and row.status == "running"
            and row.fencing_token == 1
            and row.worker_id == worker_id
        )
        return int(row.id) if held and row is not None else None
