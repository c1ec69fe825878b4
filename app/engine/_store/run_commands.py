"""Carrying out a workflow's commands on other runs (``ctx.start_run``,
``ctx.cancel_run``, ``ctx.describe_run``) inside its workflow-task commit.

The effect, the command and its answer share one transaction: a crash leaves
all three or none, and the command (hence the effect) is never written twice,
because the commit is guarded by the history length the task replayed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.engine import _history_commands as ev
from app.engine._history_commands import HistoryCommand, RecordedEvent
from app.engine._run_commands import CancelledRun, RunDescription, StartedRun
from app.engine._store.base import StoreBase
from app.engine._store.reads import _events
from app.engine._store.rows import RunRow
from app.engine._store.tx import Tx
from app.engine._tables import OPEN_STATUSES

#: Answers a named query of a run from its history (the registry's replay;
#: the store holds no workflow code). None when the run has no such query.
QueryAnswerer = Callable[[RunRow, list[RecordedEvent], str], Any]


class RunCommands(StoreBase):
    #: Set by the runtime that owns this store; without it a described run's
    #: query answer is None.
    answer_query: QueryAnswerer | None = None

    def _carry_out(
        self, tx: Tx, caller: RunRow, command: HistoryCommand
    ) -> tuple[str, dict[str, Any]]:
        """The ``run_command_answered`` event of ``command``, its effect made."""
        attrs = command.attrs
        workflow_id = str(attrs["workflow_id"])
        answer: StartedRun | CancelledRun | RunDescription
        if command.type == ev.RUN_START_REQUESTED:
            started = tx.start_run(
                workflow_name=attrs["workflow"],
                workflow_version=int(attrs["version"]),
                workflow_id=workflow_id,
                input=attrs["input"],
            )
            answer = StartedRun(run_id=started.run_id, created=started.created)
        elif command.type == ev.RUN_CANCEL_REQUESTED:
            by = f"run {caller.run_id}"
            answer = CancelledRun(cancelled=tx.request_cancel(workflow_id, attrs["reason"], by=by))
        else:
            answer = self._describe(tx, workflow_id, attrs.get("query"))
        return ev.RUN_COMMAND_ANSWERED, {"cmd": command.cmd, "answer": answer.model_dump()}

    def _describe(self, tx: Tx, workflow_id: str, query: str | None) -> RunDescription:
        run = tx.newest_run(workflow_id)
        if run is None:
            return RunDescription(exists=False)
        answered: Any = None
        if query is not None and run.status in OPEN_STATUSES and self.answer_query is not None:
            answered = self.answer_query(run, _events(tx.conn, run.run_id, 0), query)
        return RunDescription(
            exists=True,
            run_id=run.run_id,
            status=run.status,
            query=answered,
            result=run.result,
            error=run.error,
        )
