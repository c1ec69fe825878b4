"""Activities that run repository commands: reproduce, test, verify a candidate.

Each builds a fresh workspace from its recorded spec, runs the setup
commands, then its own, in the sandbox of :mod:`app.sandbox.runner`, and stores
the combined log as evidence. A command that fails is a *result* (the
workflow decides what it means); only trouble building the workspace or
storing evidence is an error, and that is retried.

Results are small: statuses, exit codes, short excerpts and evidence
references. The logs themselves never enter history.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from activities._support import parse_input, sandbox_of
from activities.workspace import (
    PatchRejectedError,
    WorkspaceSpec,
    open_workspace,
)
from app.engine.activity_context import ActivityContext
from app.engine.errors import PermanentError
from app.engine.policy import RetryPolicy, Timeouts
from app.engine.registry import activity
from app.evidence import EvidenceRef, EvidenceStore
from app.repo_config import Command
from app.sandbox.runner import CommandResult, CommandRun, run_command
from app.workspace import Workspace

StepStatus = Literal["passed", "failed", "setup-failed"]

#: Commands may run for hours in total; heartbeats (every few seconds) are what
#: notice a dead worker, within the heartbeat timeout.
_COMMAND_TIMEOUTS = Timeouts(start_to_close=6 * 3600, heartbeat=60)
_COMMAND_RETRY = RetryPolicy(initial_interval=5.0, max_interval=120.0, max_attempts=3)


class StepInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: Added after runs were recorded: omitted from the recorded input at its default.
    LATE_FIELDS: ClassVar[tuple[str, ...]] = ("setup_network",)

    workspace: WorkspaceSpec
    setup: list[Command] = Field(default_factory=list)
    #: Setup commands may reach the network (the repository's ``network: setup``).
    setup_network: bool = False
    commands: list[Command] = Field(min_length=1)
    time_limit_seconds: float = Field(gt=0)


class StepResult(BaseModel):
    #: ``failed``: a command failed or timed out; ``setup-failed``: setup did,
    #: so the step's own commands did not run and nothing was learnt.
    status: StepStatus
    results: list[CommandResult]
    log: EvidenceRef

    @property
    def failing(self) -> CommandResult | None:
        return next((r for r in self.results if not r.passed), None)


class ReproductionResult(StepResult):
    #: The reproduction ran and failed: on the base, the bug is reproduced. A
    #: command that could not be run at all (exit 126/127) reproduces nothing.
    reproduced: bool


#: What shells report for "not executable" and "not found".
_NOT_RUN = (126, 127)


async def run_step(
    actx: ActivityContext,
    ws: Workspace,
    request: StepInput,
    *,
    kind: str,
    name: str,
) -> StepResult:
    """Setup, then the commands; stop at the first failure. Stores the log."""
    sandbox = sandbox_of(actx)
    runs: list[tuple[str, CommandRun]] = []
    status: StepStatus = "passed"
    for label, commands in (("setup", request.setup), (kind, request.commands)):
        for command in commands:
            run = await run_command(
                command,
                cwd=ws.repo,
                home=ws.home,
                tmpdir=ws.tmp,
                time_limit=request.time_limit_seconds,
                sandbox=sandbox,
                heartbeat=actx.heartbeat,
                network=label == "setup" and request.setup_network,
            )
            runs.append((label, run))
            if not run.result.passed:
                status = "setup-failed" if label == "setup" else "failed"
                break
        if status != "passed":
            break
    log = actx.dep(EvidenceStore).put(combined_log(runs), kind=f"{kind}-log", name=name)
    return StepResult(status=status, results=[run.result for _, run in runs], log=log)


def combined_log(runs: list[tuple[str, CommandRun]]) -> bytes:
    """One readable log: each command, its output, and how it ended."""
    parts = []
    for label, run in runs:
        result = run.result
        if result.timed_out:
            ending = f"[killed: time limit reached after {result.duration_seconds:.1f}s]"
        else:
            ending = f"[exit {result.exit_code} after {result.duration_seconds:.1f}s]"
        where = "sandbox: network" if result.network else "sandbox: no network"
        if result.sandbox == "none":
            where = "NOT sandboxed (REPAIRBOT_SANDBOX=none)"
        header = f"$ {result.command.display()}    # {label}; {where}\n".encode()
        body = run.output if run.output.endswith(b"\n") or not run.output else run.output + b"\n"
        parts.append(header + body + ending.encode() + b"\n")
    return b"\n".join(parts)


def _name(spec: WorkspaceSpec, what: str) -> str:
    where = "candidate" if spec.patch is not None else "base"
    return f"{what}-on-{where}-{spec.base_sha[:12]}.log"


@activity("commands.run_reproduction", retry=_COMMAND_RETRY, timeouts=_COMMAND_TIMEOUTS)
async def run_reproduction(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    """Run the reproduction. On the base commit it must fail for the bug to count."""
    request = parse_input(StepInput, raw)
    async with open_workspace(actx, request.workspace) as ws:
        step = await run_step(
            actx, ws, request, kind="reproduce", name=_name(request.workspace, "reproduce")
        )
    failing = step.failing
    reproduced = (
        step.status == "failed"
        and failing is not None
        and (failing.timed_out or failing.exit_code not in _NOT_RUN)
    )
    result = ReproductionResult(**step.model_dump(), reproduced=reproduced)
    return result.model_dump(mode="json")


# -- verify_candidate ---------------------------------------------------------


class VerifyInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: Added after runs were recorded: omitted from the recorded input at its default.
    LATE_FIELDS: ClassVar[tuple[str, ...]] = ("setup_network",)

    #: Base commit plus the candidate patch (required).
    workspace: WorkspaceSpec
    setup: list[Command] = Field(default_factory=list)
    #: Ignored: the candidate (model-written code) never gets the network. Kept
    #: so that recorded inputs still parse.
    setup_network: bool = False
    reproduction: list[Command] = Field(min_length=1)
    test: Command | None = None
    time_limit_seconds: float = Field(gt=0)


Verdict = Literal["verified", "still-reproduces", "tests-fail", "setup-failed", "patch-rejected"]


class VerifyResult(BaseModel):
    verdict: Verdict
    #: The exact patch the verdict is about.
    patch_sha256: str
    reproduction: StepResult | None = None
    tests: StepResult | None = None
    #: Why it is not verified, in a sentence (feedback for the next attempt).
    reason: str | None = None

    @property
    def evidence(self) -> list[EvidenceRef]:
        return [step.log for step in (self.reproduction, self.tests) if step is not None]


@activity("commands.verify_candidate", retry=_COMMAND_RETRY, timeouts=_COMMAND_TIMEOUTS)
async def verify_candidate(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    """Fresh workspace from base + patch: the reproduction must now pass, and the tests."""
    request = parse_input(VerifyInput, raw)
    patch = request.workspace.patch
    if patch is None:
        raise PermanentError("verify_candidate needs workspace.patch: there is nothing to verify")
    try:
        async with open_workspace(actx, request.workspace) as ws:
            result = await _verify(actx, ws, request, patch.sha256)
    except PatchRejectedError as exc:
        result = VerifyResult(verdict="patch-rejected", patch_sha256=patch.sha256, reason=str(exc))
    return result.model_dump(mode="json")


async def _verify(
    actx: ActivityContext, ws: Workspace, request: VerifyInput, patch_sha: str
) -> VerifyResult:
    spec = request.workspace
    repro = await run_step(
        actx,
        ws,
        StepInput(
            workspace=spec,
            setup=request.setup,
            # Code the model wrote runs with no network at all, whatever the
            # repository's ``network: setup`` says: its setup (the candidate's
            # own, possibly rewritten) uses what the base's setup installed.
            setup_network=False,
            commands=request.reproduction,
            time_limit_seconds=request.time_limit_seconds,
        ),
        kind="reproduce",
        name=_name(spec, "reproduce"),
    )
    if repro.status != "passed":
        verdict: Verdict = "setup-failed" if repro.status == "setup-failed" else "still-reproduces"
        return VerifyResult(
            verdict=verdict,
            patch_sha256=patch_sha,
            reproduction=repro,
            reason=_reason(verdict, repro),
        )
    if request.test is None:
        return VerifyResult(verdict="verified", patch_sha256=patch_sha, reproduction=repro)
    # Setup already ran in this workspace; the tests run right after it.
    tests = await run_step(
        actx,
        ws,
        StepInput(
            workspace=spec, commands=[request.test], time_limit_seconds=request.time_limit_seconds
        ),
        kind="test",
        name=_name(spec, "test"),
    )
    if tests.status != "passed":
        return VerifyResult(
            verdict="tests-fail",
            patch_sha256=patch_sha,
            reproduction=repro,
            tests=tests,
            reason=_reason("tests-fail", tests),
        )
    return VerifyResult(verdict="verified", patch_sha256=patch_sha, reproduction=repro, tests=tests)


def _reason(verdict: Verdict, step: StepResult) -> str:
    failing = step.failing
    what = {
        "still-reproduces": "The reproduction still fails with the patch applied",
        "tests-fail": "The tests fail with the patch applied",
        "setup-failed": "The setup commands fail with the patch applied",
    }.get(verdict, verdict)
    if failing is None:
        return f"{what}."
    ending = "timed out" if failing.timed_out else f"exited with {failing.exit_code}"
    tail = failing.output_tail or failing.output_head
    return f"{what}: `{failing.command.display()}` {ending}.\n\n```text\n{tail.strip()}\n```"


ACTIVITIES = [run_reproduction, verify_candidate]
