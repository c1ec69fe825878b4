"""The one interface every coding agent implements, and what goes in and out.

An agent gets a workspace (a fresh checkout at the base commit, setup done)
plus the issue, the failing reproduction and feedback on earlier attempts.
It changes files in the workspace; the proposal is the diff it leaves,
taken against ``request.baseline``. Both back ends compute the diff the same
way, so a proposal never depends on how an agent describes its own work.
"""

from __future__ import annotations

import abc
import asyncio
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict

from app.repo_config import Command
from app.workspace import (
    LIMITS,
    DiffTooLarge,
    NestedGitRefused,
    QuotaExceeded,
    Workspace,
    changed_paths,
    diff_from,
    workspace_usage,
)


class Feedback(BaseModel):
    """Why an earlier attempt was not accepted."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: ``verification``: the candidate failed the reproduction or the tests;
    #: ``review``: a human asked for changes; ``agent``: the agent's last reply
    #: could not be used.
    kind: Literal["verification", "review", "agent"]
    text: str


@dataclass(frozen=True, kw_only=True)
class AgentRequest:
    workspace: Workspace
    issue_title: str
    issue_body: str
    #: The reproduction as a human would type it, one entry per command.
    reproduction: list[str]
    #: Its output on the base commit (where it fails).
    reproduction_output: str
    feedback: list[Feedback] = field(default_factory=list)
    #: 1 for the first proposal of a run, then 2, 3... (repair attempts).
    attempt: int = 1
    #: Tree or commit the proposal is diffed from: the workspace after setup
    #: (so setup's by-products are not proposed), or the base commit.
    baseline: str | None = None
    #: The reproduction and the test suite as runnable commands (agents with
    #: tools run them; the display strings above are for prompts).
    reproduction_commands: list[Command] = field(default_factory=list)
    test_command: Command | None = None

    @property
    def diff_base(self) -> str:
        return self.baseline or self.workspace.base_sha


@dataclass(frozen=True, kw_only=True)
class AgentProposal:
    #: The proposed change: a binary-safe unified diff against the base (may be empty).
    patch: str
    summary: str
    files_changed: list[str]
    input_tokens: int
    output_tokens: int
    #: ``command:<program>`` or ``builtin:<provider>/<model>``.
    backend: str
    #: What the agent printed or answered: evidence, never history.
    transcript: bytes = b""
    #: Model turns, tool calls and cost, when the agent counts them (built-in loop).
    turns: int = 0
    tool_calls: int = 0
    cost_usd: float = 0.0


class AgentFailed(Exception):
    """The agent ran but produced nothing usable (crashed, timed out, replied
    without a diff that applies). The caller decides whether to try again:
    that spends the tool-retry budget, not the repair budget."""

    #: Whether trying the same attempt again may help (a crashed CLI agent);
    #: a loop that resumes from its checkpoint would only fail the same way.
    retryable = True

    def __init__(self, message: str, *, transcript: bytes = b"") -> None:
        super().__init__(message)
        self.message = message
        self.transcript = transcript


class Agent(abc.ABC):
    @abc.abstractmethod
    async def propose(self, request: AgentRequest) -> AgentProposal:
        """Change the workspace to fix the bug; return the diff it leaves.

        Raises :class:`AgentFailed`, or the engine's ``TransientError`` /
        ``PermanentError`` for failures of the service behind the agent.
        """


class ProposalRefused(AgentFailed):
    """What the agent left cannot be proposed: a diff over the cap, a nested
    ``.git``, a workspace over its disk quota. Trying again would leave the
    same, so it is reported at once; the message becomes feedback."""

    retryable = False


#: What the agent may leave that is refused rather than proposed.
REFUSED_WORKSPACES = (DiffTooLarge, NestedGitRefused, QuotaExceeded)


async def proposal_diff(
    ws: Workspace, baseline: str, *, transcript: bytes = b"", quota_bytes: int | None = None
) -> tuple[str, list[str]]:
    """The diff the agent left and the paths it changes; raises
    :class:`ProposalRefused` when the workspace is over its disk quota,
    holds a nested ``.git`` or makes a diff over the cap."""
    try:
        limit = LIMITS.quota_bytes if quota_bytes is None else quota_bytes
        await asyncio.to_thread(workspace_usage, ws, limit=limit)
        patch = await diff_from(ws, baseline)
    except REFUSED_WORKSPACES as exc:
        raise ProposalRefused(f"the proposal was refused: {exc}", transcript=transcript) from None
    return patch, await changed_paths(ws, baseline)
