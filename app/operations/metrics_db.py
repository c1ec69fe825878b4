"""Metrics read from the durable record at scrape time (see app/operations/metrics.py).

Counts are GROUP BY queries. Phase durations and agent usage come from
closed runs and finished agent tasks, which never change again: the collector
folds in only what is new since its last scrape, so a scrape costs work
proportional to what happened since the previous one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import Engine, func, select

from app.app_tables import Redelivery, WebhookDelivery
from app.engine import schema
from app.operations.runs_view import STEP_PHASES, phase_of_step, step_of

#: The values the ``phase`` label takes: the run phases, and ``other``.
PHASES = frozenset(phase for _, phase in STEP_PHASES)


def metric_phase(step: str, activity: str) -> str | None:
    """The ``phase`` label for a step: a phase, ``other`` for steps no phase
    claims (the dashboard shows those under their activity's name, which is
    no phase), None for bookkeeping."""
    phase = phase_of_step(step, activity)
    if phase is None:
        return None
    return phase if phase in PHASES else "other"


deliveries = WebhookDelivery.__table__  # type: ignore[attr-defined]
redeliveries = Redelivery.__table__  # type: ignore[attr-defined]
PHASE_BUCKETS = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600)


class _Histogram:
    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}

    def observe(self, label: str, value: float) -> None:
        counts = self.counts.setdefault(label, [0] * (len(PHASE_BUCKETS) + 1))
        for i, bound in enumerate(PHASE_BUCKETS):
            if value <= bound:
                counts[i] += 1
        counts[-1] += 1
        self.sums[label] = self.sums.get(label, 0.0) + value


class RecordCollector(Collector):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._phases = _Histogram()
        self._runs_seen: set[str] = set()
        self._task_mark = 0
        self._tokens = {"input": 0, "output": 0}
        #: US dollars, as each agent attempt recorded it (priced by the
        #: operator's REPAIRBOT_AGENT_PRICES when it ran).
        self._cost = 0.0

    def collect(self) -> Iterator[Metric]:
        with self._lock, self.engine.connect() as conn:
            yield from self._counts(conn)
            self._fold_phases(conn)
            self._fold_agent(conn)
        phases = HistogramMetricFamily(
            "repairbot_phase_duration_seconds",
            "Time closed runs spent in each phase.",
            labels=["phase"],
        )
        for phase, counts in sorted(self._phases.counts.items()):
            buckets = [(str(b), counts[i]) for i, b in enumerate(PHASE_BUCKETS)]
            buckets.append(("+Inf", counts[-1]))
            phases.add_metric([phase], buckets, self._phases.sums[phase])
        yield phases
        tokens = CounterMetricFamily(
            "repairbot_agent_tokens", "Agent tokens used.", labels=["direction"]
        )
        for direction, value in self._tokens.items():
            tokens.add_metric([direction], value)
        yield tokens
        cost = self._cost
        yield CounterMetricFamily(
            "repairbot_agent_cost_dollars", "Agent cost at the configured prices.", value=cost
        )

    def _counts(self, conn: Any) -> Iterator[Metric]:
        by_status = GaugeMetricFamily("repairbot_runs", "Runs by status.", labels=["status"])
        for status, n in conn.execute(
            select(schema.runs.c.status, func.count()).group_by(schema.runs.c.status)
        ):
            by_status.add_metric([status], n)
        yield by_status
        outcome = schema.runs.c.result["outcome"].as_string()
        outcomes = CounterMetricFamily(
            "repairbot_run_outcomes", "Closed runs by outcome.", labels=["status", "outcome"]
        )
        query = (
            select(schema.runs.c.status, outcome, func.count())
            .where(schema.runs.c.closed_at.is_not(None))
            .group_by(schema.runs.c.status, outcome)
        )
        for status, result, n in conn.execute(query):
            outcomes.add_metric([status, result or ""], n)
        yield outcomes
        failure_class = schema.attempts.c.error["failure_class"].as_string()
        tried = CounterMetricFamily(
            "repairbot_activity_attempts", "Activity attempts.", labels=["activity", "outcome"]
        )
        retries = CounterMetricFamily(
            "repairbot_activity_retries", "Attempts after the first.", labels=["activity"]
        )
        failures = CounterMetricFamily(
            "repairbot_activity_failures",
            "Failed activity attempts by failure class.",
            labels=["activity", "failure_class"],
        )
        # One expression object, used in both places: PostgreSQL matches the
        # GROUP BY by its text, bound parameters included.
        is_retry = schema.attempts.c.attempt > 1
        query = (
            select(
                schema.tasks.c.activity,
                schema.attempts.c.outcome,
                failure_class,
                is_retry,
                func.count(),
            )
            .join(schema.tasks, schema.tasks.c.id == schema.attempts.c.task_id)
            .group_by(schema.tasks.c.activity, schema.attempts.c.outcome, failure_class, is_retry)
        )
        retried: dict[str, int] = {}
        failed: dict[tuple[str, str], int] = {}
        done: dict[tuple[str, str], int] = {}
        for activity, result, klass, is_retry, n in conn.execute(query):
            key = (activity, result or "running")
            done[key] = done.get(key, 0) + n
            if is_retry:
                retried[activity] = retried.get(activity, 0) + n
            if klass:
                failed[(activity, klass)] = failed.get((activity, klass), 0) + n
        for (activity, result), n in sorted(done.items()):
            tried.add_metric([activity, result], n)
        for activity, n in sorted(retried.items()):
            retries.add_metric([activity], n)
        for (activity, klass), n in sorted(failed.items()):
            failures.add_metric([activity, klass], n)
        yield from (tried, retries, failures)
        stale = conn.execute(
            select(schema.counters.c.value).where(schema.counters.c.name == schema.STALE_WRITES)
        )
        yield CounterMetricFamily(
            "repairbot_stale_writes_rejected",
            "Writes refused for a stale fencing token.",
            value=int(stale.scalar() or 0),
        )
        depth = conn.execute(select(func.count()).select_from(schema.outbox)).scalar_one()
        yield GaugeMetricFamily(
            "repairbot_outbox_depth", "Jobs written but not yet consumed.", value=depth
        )
        recorded = GaugeMetricFamily(
            "repairbot_webhook_deliveries", "Recorded deliveries by status.", labels=["status"]
        )
        query = select(deliveries.c.status, func.count()).group_by(deliveries.c.status)
        for status, n in conn.execute(query):
            recorded.add_metric([status], n)
        yield recorded
        asked = GaugeMetricFamily(
            "repairbot_webhook_redeliveries",
            "Missed deliveries by delivery-reconciler state.",
            labels=["state"],
        )
        query = select(redeliveries.c.state, func.count()).group_by(redeliveries.c.state)
        for state, n in conn.execute(query):
            asked.add_metric([state], n)
        yield asked

    def _fold_phases(self, conn: Any) -> None:
        closed = conn.execute(
            select(schema.runs.c.run_id, schema.runs.c.closed_at).where(
                schema.runs.c.closed_at.is_not(None)
            )
        ).all()
        new = [r.run_id for r in closed if r.run_id not in self._runs_seen]
        for chunk in (new[i : i + 200] for i in range(0, len(new), 200)):
            rows = conn.execute(
                select(
                    schema.tasks.c.run_id,
                    schema.tasks.c.operation_id,
                    schema.tasks.c.activity,
                    schema.tasks.c.scheduled_at,
                    schema.tasks.c.closed_at,
                )
                .where(schema.tasks.c.run_id.in_(chunk))
                .order_by(schema.tasks.c.run_id, schema.tasks.c.id)
            ).all()
            spans: dict[tuple[str, str], list[float]] = {}
            for t in rows:
                phase = metric_phase(step_of(t.run_id, t.operation_id), t.activity)
                if phase is None or t.closed_at is None:
                    continue
                span = spans.setdefault((t.run_id, phase), [t.scheduled_at, t.closed_at])
                span[0] = min(span[0], t.scheduled_at)
                span[1] = max(span[1], t.closed_at)
            for (_, phase), (start, end) in spans.items():
                self._phases.observe(phase, end - start)
            self._runs_seen.update(chunk)

    def _fold_agent(self, conn: Any) -> None:
        rows = conn.execute(
            select(schema.tasks.c.id, schema.tasks.c.result, schema.tasks.c.status).where(
                schema.tasks.c.activity == "agent.propose_fix",
                schema.tasks.c.id > self._task_mark,
                schema.tasks.c.status.in_(("completed", "failed", "cancelled")),
            )
        ).all()
        open_ids = conn.execute(
            select(func.min(schema.tasks.c.id)).where(
                schema.tasks.c.activity == "agent.propose_fix",
                schema.tasks.c.status.in_(("scheduled", "running")),
            )
        ).scalar()
        for row in sorted(rows, key=lambda r: r.id):
            if open_ids is not None and row.id > open_ids:
                break  # fold in order: an open task below may finish later
            if isinstance(row.result, dict):
                self._tokens["input"] += int(row.result.get("input_tokens") or 0)
                self._tokens["output"] += int(row.result.get("output_tokens") or 0)
                self._cost += float(row.result.get("cost_usd") or 0.0)
            self._task_mark = row.id
