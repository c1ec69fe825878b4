"""The agent's proposal: a candidate fix for the issue, written by the
repository's (or the operator's) agent in a workspace of the base."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.agent.budget import Caps, Usage
from app.contracts.workspace import WorkspaceSpec
from app.engine import RetryPolicy, Timeouts, activity_contract
from app.evidence import EvidenceRef
from app.repo_config import AgentConfig, Command


class FeedbackInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["verification", "review", "agent"]
    text: str
    #: A log to quote after the text (its end), e.g. the failing test output.
    evidence: EvidenceRef | None = None


class ProposeInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: Added after runs were recorded: omitted from the recorded input at their defaults.
    LATE_FIELDS: ClassVar[tuple[str, ...]] = ("setup_network", "test", "run_usage", "run_caps")

    #: Base commit, plus the previous candidate when refining it after a review.
    workspace: WorkspaceSpec
    #: The repository's agent; ``None`` uses the operator's default.
    agent: AgentConfig | None = None
    issue_title: str
    issue_body: str = ""
    reproduction: list[Command] = Field(default_factory=list)
    #: The reproduction's failing log on the base.
    reproduction_log: EvidenceRef | None = None
    feedback: list[FeedbackInput] = Field(default_factory=list)
    attempt: int = Field(default=1, ge=1)
    setup: list[Command] = Field(default_factory=list)
    #: Setup commands may reach the network (the repository's ``network: setup``).
    setup_network: bool = False
    time_limit_seconds: float = Field(gt=0)
    tool_retries: int = Field(default=2, ge=0)
    #: The repository's test command (the built-in agent's ``run_tests`` tool).
    test: Command | None = None
    #: What the built-in agent spent in this run's earlier repair attempts.
    run_usage: Usage | None = None
    #: The repository's run-wide token and cost budgets: the built-in loop
    #: stops before a model call once the run reached one (the operator's
    #: caps bind too, whichever is lower).
    run_caps: Caps | None = None


class ProposeResult(BaseModel):
    #: ``proposed``: a non-empty patch; ``no-change``: the agent changed nothing;
    #: ``agent-failed``: it ran out of tool retries without a usable answer;
    #: ``budget-exhausted``: the built-in loop reached a cap (``error`` says which).
    outcome: Literal["proposed", "no-change", "agent-failed", "budget-exhausted"]
    patch: EvidenceRef | None = None
    files_changed: list[str] = Field(default_factory=list)
    summary: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    backend: str = ""
    transcript: EvidenceRef | None = None
    error: str | None = None
    #: The activity attempt that produced this.
    tool_attempt: int = 1
    #: Tool retries spent: earlier attempts that ended with a tool failure.
    #: None in results recorded before it was counted (then: tool_attempt - 1).
    tool_retries: int | None = None
    #: Earlier attempts that never ended: the worker died (SIGKILL, a crash,
    #: a lost lease) while the agent ran. Resumed, not counted as tool retries.
    interrupted: int = 0
    #: What the built-in agent spent in this repair attempt (zeros for CLI agents
    #: other than their own token report).
    turns: int = 0
    tool_calls: int = 0
    cost_usd: float = 0.0


propose_fix = activity_contract(
    "agent.propose_fix",
    ProposeInput,
    ProposeResult,
    # Generous: tool retries are bounded by the repository's budget,
    # transport retries by this; backoff honours the server's retry-after.
    retry=RetryPolicy(initial_interval=5.0, backoff=2.0, max_interval=300.0, max_attempts=8),
    timeouts=Timeouts(start_to_close=3 * 3600, heartbeat=120),
)
