"""Eager claims: an activity scheduled already claimed by the worker that
schedules it.

When the worker committing a workflow task will run the activity that task
schedules (it has the code and a free slot: the one its finished activity
leaves), the task row is written as attempt 1 under token 1 with its lease
set, its attempt row is written, and no outbox row or job is made: the
claim that would follow through a job is folded into the same commit. A
crash after that commit is covered as any claimed attempt is: the reconciler
releases leases of lost workers (``leases_of_lost_workers``) and expired
leases (``expired_leases``), and the task is retried under a new token.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from app.engine._history_commands import HistoryCommand
from app.engine._policy import ActivityOptions
from app.engine._store.base import StoreBase
from app.engine._store.combined import SCHEDULE_CLAIMED, dialect_has_ctes, schedule_claimed_params
from app.engine._store.rows import Claim, RunRow
from app.engine._store.schema import lease_expiry
from app.engine._store.statements import INSERT_ATTEMPT, SCHEDULE_ACTIVITY
from app.engine._store.tx import Tx


@dataclass
class EagerOffer:
    """A worker's offer to run at once one activity a commit schedules."""

    worker_id: str
    code_version: str
    #: The activities this worker has code for.
    activities: Collection[str]
    #: The attempt claimed by the commit, once it has claimed one.
    taken: Claim | None = None

    def wants(self, activity: str) -> bool:
        return self.taken is None and activity in self.activities

    def claimed_row(self, options: ActivityOptions, now: float) -> dict[str, Any]:
        """The task row's columns of a task inserted already claimed."""
        return {
            "status": "running",
            "attempt": 1,
            "fencing_token": 1,
            "started_at": now,
            "heartbeat_at": now,
            "lease_expires_at": lease_expiry(options, started_at=now, now=now),
            "worker_id": self.worker_id,
            "code_version": self.code_version,
        }


def start_attempt(
    tx: Tx, task_id: int, attempt: int, token: int, worker_id: str, code_version: str
) -> None:
    """The attempt's own row: who ran it, with which code, under which token."""
    tx.conn.execute(
        INSERT_ATTEMPT,
        {
            "task_id": task_id,
            "attempt": attempt,
            "fencing_token": token,
            "worker_id": worker_id,
            "code_version": code_version,
            "started_at": tx.now,
        },
    )


class EagerClaims(StoreBase):
    def _insert_claimed(
        self,
        tx: Tx,
        row: dict[str, Any],
        run: RunRow,
        command: HistoryCommand,
        offer: EagerOffer,
    ) -> int | None:
        """Insert the task ``row`` (already claimed, ``EagerOffer.claimed_row``)
        and its attempt's row, and hand the attempt to ``offer``; None, with
        nothing written, when the operation id is taken."""
        if dialect_has_ctes(tx.conn):
            params = schedule_claimed_params(row)
            task_id = tx.conn.execute(SCHEDULE_CLAIMED, params).scalar()
        else:
            task_id = tx.conn.execute(SCHEDULE_ACTIVITY[tx.conn.dialect.name], row).scalar()
            if task_id is not None:
                start_attempt(tx, int(task_id), 1, 1, offer.worker_id, offer.code_version)
        if task_id is None:
            return None
        offer.taken = first_attempt(tx.now, int(task_id), run, command)
        return int(task_id)


def first_attempt(now: float, task_id: int, run: RunRow, command: HistoryCommand) -> Claim:
    """The claim of attempt 1 of ``command``'s task, inserted already claimed."""
    attrs = command.attrs
    return Claim(
        task_id=task_id,
        run_id=run.run_id,
        cmd=command.cmd,
        workflow_id=run.workflow_id,
        activity=attrs["activity"],
        operation_id=attrs["operation_id"],
        input=attrs["input"],
        attempt=1,
        token=1,
        needs_reconcile=False,
        options=ActivityOptions.from_json(attrs["options"]),
        started_at=now,
    )
