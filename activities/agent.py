"""The coding-agent activity: ask the configured agent for a fix.

Budgets stay separate. Failures of the service behind an agent (HTTP 429,
5xx, timeouts) are transient errors the runtime retries with backoff,
honouring ``retry-after``: transport retries. An agent that runs but gives
nothing usable (crashes, times out, answers without a diff that applies) is
retried while the repository's ``tool_retries`` allow, and then reported
as the outcome ``agent-failed``: tool retries. Whether to ask again with
feedback is the workflow's decision: repair attempts.

The built-in agent (``backend: http``) checkpoints each step through this
activity's heartbeat details (:mod:`app.agent.journal`), so a retried
attempt resumes its loop where the last one recorded it; a loop that stops
at a budget cap or on unusable model answers is reported at once (resuming
would stop the same way), with what it spent.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from activities._support import (
    keep_alive,
    optional_dep,
    parse_input,
    read_evidence,
    sandbox_of,
)
from activities.repo_commands import StepInput, run_step
from activities.workspace import PatchRejectedError, WorkspaceSpec, open_workspace, read_patch
from app.agent import (
    AgentFailed,
    AgentHttp,
    AgentPolicy,
    AgentProposal,
    AgentRequest,
    BudgetExhausted,
    Feedback,
    LoopHost,
    LoopStopped,
    build_agent,
)
from app.agent.base import REFUSED_WORKSPACES, ProposalRefused
from app.agent.budget import Caps, Usage, price_of
from app.agent.proxy import ModelProxy
from app.engine import (
    ActivityContext,
    ActivityDefn,
    PermanentError,
    RetryPolicy,
    Timeouts,
    TransientError,
    activity,
)
from app.evidence import EvidenceRef, EvidenceStore
from app.repo_config import AgentConfig, Command
from app.secrets import KnownSecrets
from app.workspace import NestedGitRefused, PatchRejected, Workspace, apply_patch, snapshot

T = TypeVar("T", int, float)
log = logging.getLogger("repairbot.activities")

#: Feedback evidence (a failing test log) is quoted up to this many bytes, from its end.
FEEDBACK_EVIDENCE_BYTES = 8_000


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
    #: The activity attempt that produced this (tool retries spent = this - 1).
    tool_attempt: int = 1
    #: What the built-in agent spent in this repair attempt (zeros for CLI agents
    #: other than their own token report).
    turns: int = 0
    tool_calls: int = 0
    cost_usd: float = 0.0


def model_cost(policy: AgentPolicy, backend: str, input_tokens: int, output_tokens: int) -> float:
    """USD for the tokens a CLI agent reported, priced by the operator's
    ``REPAIRBOT_AGENT_PRICES`` for the model named in ``backend``
    (``http:<provider>/<model>``, or a CLI agent's own name); 0 when unpriced."""
    price = price_of(policy.prices, backend.rsplit("/", 1)[-1]) or price_of(policy.prices, backend)
    return price.cost(input_tokens, output_tokens) if price is not None else 0.0


@activity(
    "agent.propose_fix",
    # Generous: tool retries are bounded by the repository's budget below,
    # transport retries by this; backoff honours the server's retry-after.
    retry=RetryPolicy(initial_interval=5.0, backoff=2.0, max_interval=300.0, max_attempts=8),
    timeouts=Timeouts(start_to_close=3 * 3600, heartbeat=120),
)
async def propose_fix(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    request = parse_input(ProposeInput, raw)
    store = actx.dep(EvidenceStore)
    # The base first, without the candidate: setup runs there and the
    # snapshot after it is what the proposal is diffed from, so a refined
    # candidate is proposed whole, and setup's by-products never are.
    base = request.workspace.model_copy(update={"patch": None})
    async with open_workspace(actx, base) as ws:
        baseline = await _prepare(actx, ws, request, store)
        agent_http = optional_dep(actx, AgentHttp)
        policy = _within(optional_dep(actx, AgentPolicy) or AgentPolicy(), request.run_caps)
        agent = build_agent(
            request.agent,
            policy=policy,
            # Only the operator's own command agent uses it (see build_agent).
            model_access=policy.model_access(optional_dep(actx, ModelProxy))
            if request.agent is None
            else None,
            http_client=agent_http.client if agent_http else None,
            time_limit=request.time_limit_seconds,
            sandbox=sandbox_of(actx),
            heartbeat=actx.heartbeat,
            host=_loop_host(actx, store),
            earlier_usage=request.run_usage,
        )
        agent_request = AgentRequest(
            workspace=ws,
            issue_title=request.issue_title,
            issue_body=request.issue_body,
            reproduction=[command.display() for command in request.reproduction],
            reproduction_output=_text(store, request.reproduction_log),
            feedback=[_feedback(store, item) for item in request.feedback],
            attempt=request.attempt,
            baseline=baseline,
            reproduction_commands=list(request.reproduction),
            test_command=request.test,
        )
        try:
            try:
                proposal = await keep_alive(
                    actx, agent.propose(agent_request), doing="asking the agent"
                )
            except REFUSED_WORKSPACES as exc:
                # The built-in loop records its workspace after every tool call.
                raise ProposalRefused(f"the proposal was refused: {exc}") from None
        except AgentFailed as failure:
            return _failed(actx, request, store, failure).model_dump(mode="json")
    return _proposed(actx, request, store, proposal).model_dump(mode="json")


def _within(policy: AgentPolicy, caps: Caps | None) -> AgentPolicy:
    """The operator's policy with its run caps lowered to the repository's."""
    if caps is None:
        return policy
    run = policy.budget.run

    def lower(ours: T | None, theirs: T | None) -> T | None:
        return theirs if ours is None else ours if theirs is None else min(ours, theirs)

    tighter = run.model_copy(
        update={
            "tokens": lower(run.tokens, caps.tokens),
            "cost_usd": lower(run.cost_usd, caps.cost_usd),
        }
    )
    return replace(policy, budget=policy.budget.model_copy(update={"run": tighter}))


def _loop_host(actx: ActivityContext, store: EvidenceStore) -> LoopHost:
    return LoopHost(
        store=store,
        save=actx.checkpoint,
        beat=actx.heartbeat,
        previous=actx.last_checkpoint,
        fault=actx.fault,
        secrets=known_secrets(actx),
    )


def known_secrets(actx: ActivityContext) -> KnownSecrets:
    """Every secret this worker holds (its settings', installation tokens
    minted so far) plus the agent policy's keys and command environment."""
    worker = optional_dep(actx, KnownSecrets)
    policy = optional_dep(actx, AgentPolicy) or AgentPolicy()
    return KnownSecrets([*(worker.values() if worker else ()), *policy.secrets])


async def _prepare(
    actx: ActivityContext, ws: Workspace, request: ProposeInput, store: EvidenceStore
) -> str:
    """Run setup, take the baseline snapshot, apply the candidate; the baseline."""
    if request.setup:
        setup = await run_step(
            actx,
            ws,
            StepInput(
                workspace=request.workspace,
                commands=request.setup,
                setup_network=request.setup_network,
                time_limit_seconds=request.time_limit_seconds,
            ),
            kind="setup",
            name=f"agent-setup-attempt-{request.attempt}.log",
        )
        if setup.status != "passed":
            # It passed when the bug was reproduced: most likely a flaky download.
            raise TransientError(f"setup failed before the agent ran (log {setup.log.sha256})")
    try:
        baseline = await snapshot(ws)
    except NestedGitRefused as exc:
        # Setup (repository code) left a .git below the root: the worker's
        # git would follow it. Running setup again would leave it again.
        raise PermanentError(f"setup left the work tree unusable: {exc}") from None
    candidate = read_patch(store, request.workspace.patch)
    if candidate:
        try:
            await apply_patch(ws, candidate, index=True)
        except PatchRejected as exc:
            raise PatchRejectedError(f"the candidate patch does not apply: {exc}") from None
    return baseline


def _failed(
    actx: ActivityContext, request: ProposeInput, store: EvidenceStore, failure: AgentFailed
) -> ProposeResult:
    """Retry while tool retries remain (raises), else report the failure.

    Counted by activity attempt, so a transport retry before a tool failure
    also spends one: conservative, and needs no state across attempts.
    """
    transcript = store.put(
        known_secrets(actx).redact_bytes(failure.transcript),
        kind="agent-transcript",
        name=f"agent-attempt-{request.attempt}-try-{actx.attempt}.log",
    )
    if failure.retryable and actx.attempt <= request.tool_retries:
        raise TransientError(f"{failure.message} (transcript {transcript.sha256}); trying again")
    usage = failure.usage if isinstance(failure, LoopStopped) else Usage()
    return ProposeResult(
        outcome="budget-exhausted" if isinstance(failure, BudgetExhausted) else "agent-failed",
        transcript=transcript,
        error=failure.message,
        tool_attempt=actx.attempt,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        turns=usage.turns,
        tool_calls=usage.tool_calls,
        cost_usd=usage.cost_usd,
    )


def _proposed(
    actx: ActivityContext, request: ProposeInput, store: EvidenceStore, proposal: AgentProposal
) -> ProposeResult:
    secrets = known_secrets(actx)
    transcript = store.put(
        secrets.redact_bytes(proposal.transcript),
        kind="agent-transcript",
        name=f"agent-attempt-{request.attempt}.log",
    )
    if secrets.found_in(proposal.patch):
        # Not redacted and proposed: a patch with a hole in it is not the
        # change that would be verified, and the agent had no business
        # holding a secret. The run ends; nothing is stored or pushed.
        raise PermanentError(
            f"the agent's proposal (attempt {request.attempt}) contains a secret this "
            f"installation holds (an API key, token or key material); it was refused and "
            f"nothing was pushed (transcript {transcript.sha256}, redacted)"
        )
    patch = None
    if proposal.patch:
        patch = store.put(
            proposal.patch.encode(errors="surrogateescape"),
            kind="patch",
            name=f"candidate-attempt-{request.attempt}.patch",
        )
    log.info(
        "agent %s changed %d file(s) for run %s (repair attempt %s)",
        proposal.backend,
        len(proposal.files_changed),
        actx.run_id,
        request.attempt,
    )
    return ProposeResult(
        outcome="proposed" if patch is not None else "no-change",
        patch=patch,
        files_changed=[secrets.redact(path) for path in proposal.files_changed],
        summary=secrets.redact(proposal.summary),
        input_tokens=proposal.input_tokens,
        output_tokens=proposal.output_tokens,
        backend=proposal.backend,
        transcript=transcript,
        tool_attempt=actx.attempt,
        turns=proposal.turns,
        tool_calls=proposal.tool_calls,
        # The built-in loop prices its own tokens; for other agents, the
        # operator's model price table does.
        cost_usd=proposal.cost_usd
        or model_cost(
            optional_dep(actx, AgentPolicy) or AgentPolicy(),
            proposal.backend,
            proposal.input_tokens,
            proposal.output_tokens,
        ),
    )


def _text(store: EvidenceStore, ref: EvidenceRef | None, limit: int | None = None) -> str:
    if ref is None:
        return ""
    data = read_evidence(store, ref)
    if limit is not None and len(data) > limit:
        data = b"[... earlier output omitted ...]\n" + data[-limit:]
    return data.decode(errors="replace")


def _feedback(store: EvidenceStore, item: FeedbackInput) -> Feedback:
    text = item.text
    if item.evidence is not None:
        quoted = _text(store, item.evidence, FEEDBACK_EVIDENCE_BYTES)
        text = f"{text}\n\nLog ({item.evidence.name}):\n\n{quoted}"
    return Feedback(kind=item.kind, text=text)


ACTIVITIES: list[ActivityDefn] = [propose_fix]
