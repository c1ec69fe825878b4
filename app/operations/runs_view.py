"""What the dashboard and the JSON API show about runs: read-only queries over
the durable record (runs, tasks, attempts, events) shaped for people.

A run's repository is its input's ``repo_id`` (and ``repo``, its name when the
run started); the visible set of repositories is decided by the caller (see
app/web/access.py), and applied in SQL so pages and counts agree. A run that
recorded its repository's id is visible by that id only: a repository that
later took the same name shows nothing of it. The live phase of an open run
is the workflow's own answer to its ``status`` query (a replay, nothing
written).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, and_, false, func, or_, select, true

from app.engine import CLOSED_STATUSES, RunRow, RuntimeClient, run_row, schema

OPEN_STATUSES = ("running", "cancelling")
PER_PAGE = 25
#: Repair workflow steps -> the phase they belong to (first match wins).
STEP_PHASES = (
    (re.compile(r"^(confirm-|propose-revert$)"), "confirming"),
    (re.compile(r"^(commit|push|check|check-superseded)-rebase-"), "merging"),
    (re.compile(r"^(base-compare|evidence-recheck|policy-recheck|approver-recheck)-"), "merging"),
    (re.compile(r"^evidence-rebind-"), "merging"),
    (re.compile(r"^(evidence|policy)-\d+$"), "awaiting-review"),
    (re.compile(r"^issue-now$"), "preparing"),
    (re.compile(r"^(base|prepare)$"), "preparing"),
    (re.compile(r"^reproduce$"), "reproducing"),
    (re.compile(r"^(propose|verify)-"), "repairing"),
    (re.compile(r"^(commit|push|pull-request|check)-"), "publishing"),
    (re.compile(r"^reviewer-"), "awaiting-review"),
    (re.compile(r"^(reread|ready|merge|base-recheck|reverify)-"), "merging"),
    (re.compile(r"^cancel-"), "cancelling"),
)


@dataclass(frozen=True)
class Visible:
    """The repositories a caller may read: by id, and by lower-case name for
    runs recorded before runs carried their repository's id."""

    ids: frozenset[int] = frozenset()
    names: frozenset[str] = frozenset()


@dataclass(frozen=True)
class RunFilters:
    repo: str = ""
    status: str = ""
    phase: str = ""
    outcome: str = ""
    page: int = 1


@dataclass
class RunSummary:
    run: RunRow
    repo: str | None
    issue_number: int | None
    phase: str
    outcome: str
    #: The issue's title as the run received it (issue text: escape it).
    title: str | None = None
    #: The proposal's pull request, once there is one.
    pull_number: int | None = None

    @property
    def seconds(self) -> float:
        """How long the run lasted, or has lasted so far."""
        return (self.run.closed_at or time.time()) - self.run.created_at


@dataclass
class PhaseSpan:
    phase: str
    started_at: float
    ended_at: float | None
    steps: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return (self.ended_at or time.time()) - self.started_at


@dataclass
class Attempt:
    step: str
    activity: str
    attempt: int
    worker_id: str | None
    code_version: str | None
    outcome: str
    failure: str
    started_at: float | None
    seconds: float | None


@dataclass
class RunDetail:
    summary: RunSummary
    state: dict[str, Any]
    timeline: list[PhaseSpan]
    attempts: list[Attempt]
    evidence: list[dict[str, Any]]
    tokens: tuple[int, int]
    #: US dollars the agent's attempts recorded (priced when they ran).
    cost_usd: float
    events: list[dict[str, Any]]


def repo_of(run: RunRow) -> str | None:
    value = run.input.get("repo") if isinstance(run.input, dict) else None
    return str(value) if value else None


def repo_id_of(run: RunRow) -> int | None:
    value = run.input.get("repo_id") if isinstance(run.input, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _repo_column() -> ColumnElement[Any]:
    column: ColumnElement[Any] = schema.runs.c.input["repo"].as_string()
    return column


def _visible(visible: Visible) -> ColumnElement[bool]:
    repo_id: ColumnElement[Any] = schema.runs.c.input["repo_id"].as_integer()
    by_id = repo_id.in_(sorted(visible.ids)) if visible.ids else false()
    # GitHub names are case-insensitive; the visible names are lower case.
    by_name = (
        and_(repo_id.is_(None), func.lower(_repo_column()).in_(sorted(visible.names)))
        if visible.names
        else false()
    )
    return or_(by_id, by_name)


def _where(filters: RunFilters, visible: Visible | None) -> list[ColumnElement[bool]]:
    """``visible``: repositories the caller may read (None: every run)."""
    clauses: list[ColumnElement[bool]] = []
    if visible is not None:
        clauses.append(_visible(visible))
    if filters.repo:
        clauses.append(func.lower(_repo_column()) == filters.repo.lower())
    if filters.status:
        clauses.append(schema.runs.c.status == filters.status)
    if filters.outcome:
        clauses.append(schema.runs.c.result["outcome"].as_string() == filters.outcome)
    if filters.phase:
        # Only open runs are in a phase; the phase itself is checked per run.
        clauses.append(schema.runs.c.status.in_(OPEN_STATUSES))
    return clauses


def live_state(runtime: RuntimeClient, run: RunRow) -> dict[str, Any]:
    """The workflow's own account (open runs) or its result (closed runs)."""
    if run.status in OPEN_STATUSES or run.status in ("needs-human", "blocked-nondeterministic"):
        try:
            answer = runtime.query(run.run_id, "status")
        except Exception:  # no such query, or the code cannot replay this history
            answer = None
        if isinstance(answer, dict):
            return answer
    return dict(run.result) if isinstance(run.result, dict) else {}


def summarize(
    runtime: RuntimeClient, run: RunRow, state: dict[str, Any] | None = None
) -> RunSummary:
    state = live_state(runtime, run) if state is None else state
    if run.status == "cancelling":
        phase = run.cancel_phase or "cancel-requested"
    elif run.status in CLOSED_STATUSES:
        phase = ""
    else:
        phase = str(state.get("phase") or "")
    given = run.input if isinstance(run.input, dict) else {}
    issue, title, pull = (
        given.get("issue_number"),
        given.get("issue_title"),
        state.get("pull_number"),
    )
    return RunSummary(
        run=run,
        repo=repo_of(run),
        issue_number=int(issue) if issue is not None else None,
        phase=phase,
        outcome=str(state.get("outcome") or ""),
        title=title if isinstance(title, str) and title else None,
        pull_number=pull if isinstance(pull, int) and not isinstance(pull, bool) else None,
    )


def list_runs(
    runtime: RuntimeClient, filters: RunFilters, visible: Visible | None
) -> tuple[list[RunSummary], int]:
    """One page of runs, newest first, and how many match in all."""
    where = and_(true(), *_where(filters, visible))
    offset = (max(filters.page, 1) - 1) * PER_PAGE
    # One connection at a time: on SQLite every transaction takes the write
    # lock (app/engine/_db.py), so a query nested inside another would wait on it.
    if filters.phase:
        with runtime.engine.connect() as conn:
            rows = conn.execute(
                select(schema.runs).where(where).order_by(schema.runs.c.created_at.desc())
            ).all()
        every = [summarize(runtime, run_row(r)) for r in rows]
        matching = [s for s in every if s.phase == filters.phase]
        return matching[offset : offset + PER_PAGE], len(matching)
    with runtime.engine.connect() as conn:
        total = conn.execute(
            select(func.count()).select_from(schema.runs).where(where)
        ).scalar_one()
        rows = conn.execute(
            select(schema.runs)
            .where(where)
            .order_by(schema.runs.c.created_at.desc(), schema.runs.c.run_id)
            .offset(offset)
            .limit(PER_PAGE)
        ).all()
    return [summarize(runtime, run_row(r)) for r in rows], int(total)


def known_repositories(runtime: RuntimeClient, visible: Visible | None) -> list[str]:
    column = _repo_column()
    query = select(column).where(column.is_not(None)).distinct()
    if visible is not None:
        query = query.where(_visible(visible))
    with runtime.engine.connect() as conn:
        return sorted(str(r[0]) for r in conn.execute(query).all())


def step_of(run_id: str, operation_id: str) -> str:
    return operation_id.removeprefix(f"{run_id}:")


def phase_of_step(step: str, activity: str) -> str | None:
    """The phase a step belongs to; None for bookkeeping (status comments)."""
    if step.startswith("status-"):
        return None
    for pattern, phase in STEP_PHASES:
        if pattern.search(step):
            return phase
    return activity


def timeline(run: RunRow, task_rows: list[Any], current: str) -> list[PhaseSpan]:
    """Consecutive activities of one phase form a span, from the first
    scheduling to the last close (or now, while the phase lasts)."""
    spans: list[PhaseSpan] = []
    for t in task_rows:
        step = step_of(run.run_id, t.operation_id)
        phase = phase_of_step(step, t.activity)
        if phase is None:
            continue
        if spans and spans[-1].phase == phase:
            spans[-1].steps.append(step)
            spans[-1].ended_at = t.closed_at
            continue
        if spans and spans[-1].ended_at is None:
            spans[-1].ended_at = t.scheduled_at
        spans.append(PhaseSpan(phase, t.scheduled_at, t.closed_at, [step]))
    if current and (not spans or spans[-1].phase != current) and run.status in OPEN_STATUSES:
        start = spans[-1].ended_at if spans and spans[-1].ended_at else run.created_at
        spans.append(PhaseSpan(current, start, None))
    if run.closed_at and spans and spans[-1].ended_at is None:
        spans[-1].ended_at = run.closed_at
    return spans


def _seconds(started_at: float | None, finished_at: float | None) -> float | None:
    return finished_at - started_at if started_at and finished_at else None


def run_detail(runtime: RuntimeClient, run: RunRow) -> RunDetail:
    state = live_state(runtime, run)
    summary = summarize(runtime, run, state)
    with runtime.engine.connect() as conn:
        task_rows = conn.execute(
            select(schema.tasks)
            .where(schema.tasks.c.run_id == run.run_id)
            .order_by(schema.tasks.c.id)
        ).all()
    tried = [
        Attempt(
            step=step_of(run.run_id, a["operation_id"]),
            activity=a["activity"],
            attempt=a["attempt"],
            worker_id=a["worker_id"],
            code_version=a["code_version"],
            outcome=a["outcome"] or "running",
            failure=_failure_text(a["error"]),
            started_at=a["started_at"],
            seconds=_seconds(a["started_at"], a["finished_at"]),
        )
        for a in runtime.store.activity_attempts(run.run_id)
    ]
    events = [
        {"seq": e.seq, "type": e.type, "data": e.data}
        for e in runtime.store.load_events(run.run_id)
    ]
    return RunDetail(
        summary=summary,
        state=state,
        timeline=timeline(run, list(task_rows), summary.phase),
        attempts=tried,
        evidence=list(state.get("evidence") or []),
        tokens=agent_tokens(list(task_rows)),
        cost_usd=agent_cost(list(task_rows)),
        events=events,
    )


def agent_tokens(task_rows: list[Any]) -> tuple[int, int]:
    """Input and output tokens the agent's completed proposals report."""
    used_in = used_out = 0
    for t in task_rows:
        if t.activity == "agent.propose_fix" and isinstance(t.result, dict):
            used_in += int(t.result.get("input_tokens") or 0)
            used_out += int(t.result.get("output_tokens") or 0)
    return used_in, used_out


def agent_cost(task_rows: list[Any]) -> float:
    """US dollars the agent's completed proposals recorded."""
    return sum(
        float(t.result.get("cost_usd") or 0.0)
        for t in task_rows
        if t.activity == "agent.propose_fix" and isinstance(t.result, dict)
    )


def _failure_text(error: Any) -> str:
    if not isinstance(error, dict):
        return ""
    parts = [str(error.get(k)) for k in ("failure_class", "error_type") if error.get(k)]
    message = str(error.get("message") or "")
    return " ".join(parts) + (f": {message[:200]}" if message else "")
