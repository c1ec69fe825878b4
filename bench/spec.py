"""What one benchmark case is and what it reports, as plain JSON-able data:
the orchestrator hands a case to a child process and reads the result back."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

OURS = "ours"
DBOS = "dbos"
SQLITE = "sqlite"
POSTGRES = "postgres"
INPROCESS = "inprocess"
#: arq as app/main/worker_process.py wires it: a worker runs the follow-up jobs it can
#: itself ("eager"), and Redis carries the rest.
ARQ = "arq"
#: arq with every job through Redis and a poll: the channel's own cost.
ARQ_DISPATCHED = "arq-dispatched"
DISPATCHERS = (INPROCESS, ARQ, ARQ_DISPATCHED)

#: The prefix of the one line a child prints for the orchestrator; the rest
#: of what a child writes (library logs) is only shown when the case fails.
RESULT_MARKER = "BENCH-RESULT "


@dataclass(frozen=True)
class Case:
    system: str  # ours | dbos
    db: str  # sqlite | postgres
    dispatch: str  # one of DISPATCHERS (DBOS: always "inprocess", its own executor)
    n: int
    repeat: int = 3
    # One warm-up run of this many steps before the measured ones. Ten was not
    # enough on PostgreSQL: fresh server backends are slow for their first
    # statements (catalog caches; psycopg prepares only after 5 executions)
    # and the pool hands its connections out in turn, so runs kept getting
    # faster for a few seconds after a short warm-up.
    warmup_n: int = 100
    postgres_url: str = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    redis_url: str = "redis://127.0.0.1:6379/9"
    arq_poll_delay: float | None = None  # None: whatever arq_workers defaults to

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str) -> Case:
        return cls(**json.loads(raw))

    @property
    def label(self) -> str:
        return f"{self.system}/{self.db}/{self.dispatch}/N={self.n}"


@dataclass(frozen=True)
class Timing:
    wall: float
    cpu: float


class Stopwatch:
    """Wall and process CPU time of one measured run."""

    def __init__(self) -> None:
        self._wall = time.perf_counter()
        self._cpu = time.process_time()

    def stop(self) -> Timing:
        return Timing(time.perf_counter() - self._wall, time.process_time() - self._cpu)


@dataclass
class CaseResult:
    case: Case
    totals: list[float] = field(default_factory=list)  # wall seconds, one per measured run
    # This process's CPU seconds (all threads) per measured run: on a shared
    # machine it moves less than wall time when other jobs compete for cores.
    cpu_totals: list[float] = field(default_factory=list)
    error: str | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.totals)

    @property
    def total(self) -> float:
        # The median resists the odd slow run on a shared machine better than the mean.
        return statistics.median(self.totals)

    @property
    def per_step_ms(self) -> float:
        return self.total / self.case.n * 1000.0

    @property
    def cpu_per_step_ms(self) -> float | None:
        if not self.cpu_totals:
            return None
        return statistics.median(self.cpu_totals) / self.case.n * 1000.0

    def record(self, timing: Timing) -> None:
        self.totals.append(timing.wall)
        self.cpu_totals.append(timing.cpu)

    def to_json(self) -> str:
        return json.dumps(
            {
                "case": asdict(self.case),
                "totals": self.totals,
                "cpu_totals": self.cpu_totals,
                "error": self.error,
                "notes": self.notes,
            }
        )

    @classmethod
    def from_json(cls, raw: str) -> CaseResult:
        data = json.loads(raw)
        return cls(
            Case(**data["case"]),
            list(data["totals"]),
            list(data["cpu_totals"]),
            data["error"],
            data["notes"],
        )
