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

import asyncio
import contextlib
import dataclasses
import os
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from activities import test_outcomes
from activities._support import parse_input, read_evidence, sandbox_of
from activities.environments import ENV_VAR, Environment, EnvironmentCache, environment_key
from activities.test_outcomes import Comparison, compare, named
from activities.unrunnable import cannot_run
from activities.workspace import (
    PatchRejectedError,
    WorkspaceSpec,
    open_workspace,
)
from app.config import Settings
from app.engine import (
    ActivityContext,
    ActivityDefn,
    PermanentError,
    RetryPolicy,
    Timeouts,
    activity,
)
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
    LATE_FIELDS: ClassVar[tuple[str, ...]] = ("setup_network", "baseline_test", "reuse_env")

    workspace: WorkspaceSpec
    setup: list[Command] = Field(default_factory=list)
    #: Setup commands may reach the network (the repository's ``network: setup``).
    setup_network: bool = False
    commands: list[Command] = Field(min_length=1)
    time_limit_seconds: float = Field(gt=0)
    #: Setup installs into ``$REPAIRBOT_ENV`` and may build it once for the run
    #: (the repository's ``setup_once``); only the base's setup builds it.
    reuse_env: bool = False
    #: The repository's test command, run on the base after the reproduction
    #: (same workspace, setup done once): the baseline candidates are judged against.
    baseline_test: Command | None = None


class StepResult(BaseModel):
    #: ``failed``: a command failed or timed out; ``setup-failed``: setup did,
    #: so the step's own commands did not run and nothing was learnt.
    status: StepStatus
    results: list[CommandResult]
    log: EvidenceRef
    #: Setup was skipped: the environment the base's setup built was reused.
    reused_env: bool = False
    #: The ``$REPAIRBOT_ENV`` the step used (for the next step in the same
    #: workspace; never recorded).
    environment: Environment | None = Field(default=None, exclude=True)

    @property
    def failing(self) -> CommandResult | None:
        return next((r for r in self.results if not r.passed), None)


class BaselineTests(BaseModel):
    """The test command's result on the base commit: evidence, and the yardstick."""

    base_sha: str
    step: StepResult
    passed: bool
    #: Per-test outcomes (JSON evidence), when the command wrote a report.
    outcomes: EvidenceRef | None = None
    #: Tests failing on the base (the first few, by id) and how many there are.
    failing: list[str] = Field(default_factory=list)
    failing_count: int = 0
    #: Why the test command could not run at all (a config mistake), if so.
    cannot_run: str | None = None


class ReproductionResult(StepResult):
    #: The reproduction ran and failed: on the base, the bug is reproduced. A
    #: command that could not be run at all (exit 126/127) reproduces nothing.
    reproduced: bool
    #: Why the reproduction could not run at all (not found, usage error,
    #: import error, no tests): a config mistake, not the bug.
    cannot_run: str | None = None
    #: The test command on the base, when asked for (``baseline_test``).
    baseline: BaselineTests | None = None


#: What shells report for "not executable" and "not found".
_NOT_RUN = (126, 127)


async def run_step(
    actx: ActivityContext,
    ws: Workspace,
    request: StepInput,
    *,
    kind: str,
    name: str,
    extra_env: dict[str, str] | None = None,
    environment: Environment | None = None,
) -> StepResult:
    """Setup, then the commands; stop at the first failure. Stores the log.

    Setup is skipped when the environment the base's setup built for this
    run can be reused (see :mod:`activities.environments`); ``kind="setup"``
    (the agent's preparation) means the commands *are* setup. ``environment``:
    the one an earlier step in this workspace used (its setup already ran).
    """
    setup, commands = request.setup, request.commands
    if kind == "setup":
        setup, commands = [*setup, *commands], []
    cache = EnvironmentCache(actx.dep(Settings).data_dir / "environments")
    key = environment_key(
        request.workspace.repo, request.workspace.base_sha, setup, request.setup_network, ws.repo
    )
    ready = cache.ready(key) if setup else None
    may_build = bool(setup) and request.reuse_env and request.workspace.patch is None
    with contextlib.ExitStack() as stack:
        if environment is not None:
            env = environment
        elif ready is not None:
            cache.touch(key)
            env = Environment(path=ready, reused=True, shared=True)
        elif may_build and (built := stack.enter_context(cache.building(key))) is not None:
            env = Environment(path=built, reused=False, shared=True)
        else:
            env = Environment(path=ws.root / "env", reused=False, shared=False)
        env.path.mkdir(exist_ok=True)
        skip_setup = env.reused or environment is not None
        runs, status = await _run_commands(
            actx, ws, request, env, [] if skip_setup else setup, commands, kind, extra_env
        )
        if env.shared and not skip_setup and status != "setup-failed":
            cache.mark_ready(key)  # setup passed: later steps of the run reuse it
    log = actx.dep(EvidenceStore).put(
        combined_log(runs, reused=env.reused and environment is None),
        kind=f"{kind}-log",
        name=name,
    )
    result = StepResult(
        status=status, results=[run.result for _, run in runs], log=log, reused_env=env.reused
    )
    result.environment = env
    return result


async def _run_commands(
    actx: ActivityContext,
    ws: Workspace,
    request: StepInput,
    env: Environment,
    setup: list[Command],
    commands: list[Command],
    kind: str,
    extra_env: dict[str, str] | None,
) -> tuple[list[tuple[str, CommandRun]], StepStatus]:
    sandbox = sandbox_of(actx)
    # Only setup writes a shared environment; every other command reads it.
    reading = dataclasses.replace(
        sandbox,
        isolation=dataclasses.replace(
            sandbox.isolation, read_only=(*sandbox.isolation.read_only, env.path)
        ),
    )
    runs: list[tuple[str, CommandRun]] = []
    for label, group in (("setup", setup), (kind, commands)):
        is_setup = label == "setup"
        writes_env = is_setup or not env.shared
        for command in group:
            run = await run_command(
                command,
                cwd=ws.repo,
                home=ws.home,
                tmpdir=ws.tmp,
                time_limit=request.time_limit_seconds,
                sandbox=sandbox if writes_env else reading,
                heartbeat=actx.heartbeat,
                network=is_setup and request.setup_network,
                extra_env={ENV_VAR: str(env.path), **({} if is_setup else extra_env or {})},
                writable=[env.path] if writes_env else [],
            )
            runs.append((label, relative_to_workspace(run, ws)))
            if not run.result.passed:
                return runs, "setup-failed" if is_setup else "failed"
    return runs, "passed"


def relative_to_workspace(run: CommandRun, ws: Workspace) -> CommandRun:
    """The run with the worker's workspace paths replaced: output names files
    relative to the repository, as a maintainer knows them. The excerpts go
    into public comments; the worker's directory layout is none of their
    business."""
    replacements = []
    for root in {str(ws.root), os.path.realpath(ws.root)}:
        replacements += [(f"{root}/repo/", ""), (f"{root}/repo", "."), (root, "<workspace>")]

    def scrub(text: str) -> str:
        for old, new in replacements:
            text = text.replace(old, new)
        return text

    output = run.output
    for old, new in replacements:
        output = output.replace(old.encode(), new.encode())
    result = run.result.model_copy(
        update={
            "output_head": scrub(run.result.output_head),
            "output_tail": scrub(run.result.output_tail),
        }
    )
    return CommandRun(result=result, output=output)


def combined_log(runs: list[tuple[str, CommandRun]], *, reused: bool = False) -> bytes:
    """One readable log: each command, its output, and how it ended."""
    parts = []
    if reused:
        parts.append(
            b"[setup skipped: this run's base setup built the environment "
            b"($REPAIRBOT_ENV), reused read-only]\n"
        )
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
            actx,
            ws,
            request,
            kind="reproduce",
            name=_name(request.workspace, "reproduce"),
        )
        baseline = None
        if request.baseline_test is not None and step.status != "setup-failed":
            baseline = await _baseline(actx, ws, request, request.baseline_test, step.environment)
    failing = step.failing
    problem = cannot_run(failing) if failing is not None and step.status == "failed" else None
    reproduced = (
        step.status == "failed"
        and failing is not None
        and (failing.timed_out or failing.exit_code not in _NOT_RUN)
    )
    if request.baseline_test is not None:  # the caller tells broken commands apart
        reproduced = reproduced and problem is None
    result = ReproductionResult(
        **step.model_dump(), reproduced=reproduced, cannot_run=problem, baseline=baseline
    )
    return result.model_dump(mode="json")


async def _run_tests(
    actx: ActivityContext,
    ws: Workspace,
    spec: WorkspaceSpec,
    test: Command,
    limit: float,
    environment: Environment | None,
) -> tuple[StepResult, dict[str, test_outcomes.Outcome] | None]:
    """The test command once, in a workspace where setup already ran, and its
    per-test outcomes when it wrote a report."""
    report = ws.tmp / test_outcomes.REPORT_NAME
    with contextlib.suppress(OSError):  # a directory planted there: no report is read
        report.unlink(missing_ok=True)  # never read an earlier run's report
    step = await run_step(
        actx,
        ws,
        StepInput(workspace=spec, commands=[test], time_limit_seconds=limit),
        kind="test",
        name=_name(spec, "test"),
        extra_env=test_outcomes.report_options(ws.tmp),
        environment=environment,
    )
    outcomes = await asyncio.to_thread(test_outcomes.read_report, ws.tmp)
    if outcomes is None:  # not pytest: unittest's verbose lines, if that is what ran
        log = read_evidence(actx.dep(EvidenceStore), step.log)
        outcomes = test_outcomes.parse_unittest(log.decode(errors="replace"))
    return step, outcomes


async def _baseline(
    actx: ActivityContext,
    ws: Workspace,
    request: StepInput,
    test: Command,
    environment: Environment | None,
) -> BaselineTests:
    spec = request.workspace
    limit = request.time_limit_seconds
    step, outcomes = await _run_tests(actx, ws, spec, test, limit, environment)
    failing = sorted(t for t, o in (outcomes or {}).items() if o == "failed")
    ref = None
    if outcomes is not None:
        store = actx.dep(EvidenceStore)
        ref = store.put(test_outcomes.encode(outcomes), kind="test-outcomes", name="base.json")
    result = step.failing
    return BaselineTests(
        base_sha=spec.base_sha,
        step=step,
        passed=step.status == "passed",
        outcomes=ref,
        failing=failing[: test_outcomes.MAX_NAMED],
        failing_count=len(failing),
        cannot_run=cannot_run(result) if result is not None else None,
    )


# -- verify_candidate ---------------------------------------------------------


class VerifyInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: Added after runs were recorded: omitted from the recorded input at its default.
    LATE_FIELDS: ClassVar[tuple[str, ...]] = ("setup_network", "baseline")

    #: Base commit plus the candidate patch (required).
    workspace: WorkspaceSpec
    setup: list[Command] = Field(default_factory=list)
    #: Ignored: the candidate (model-written code) never gets the network. Kept
    #: so that recorded inputs still parse.
    setup_network: bool = False
    reproduction: list[Command] = Field(min_length=1)
    test: Command | None = None
    time_limit_seconds: float = Field(gt=0)
    #: The tests on this base: a candidate is judged by what it changes.
    #: None: the tests must pass outright (as before baselines existed).
    baseline: BaselineTests | None = None


Verdict = Literal["verified", "still-reproduces", "tests-fail", "setup-failed", "patch-rejected"]


class VerifyResult(BaseModel):
    verdict: Verdict
    #: The exact patch the verdict is about.
    patch_sha256: str
    reproduction: StepResult | None = None
    tests: StepResult | None = None
    #: Why it is not verified, in a sentence (feedback for the next attempt).
    reason: str | None = None
    #: How the tests compare with the base's (when there was a baseline).
    comparison: Comparison | None = None

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
    limit = request.time_limit_seconds
    tests, outcomes = await _run_tests(actx, ws, spec, request.test, limit, repro.environment)
    baseline = request.baseline
    if baseline is None or baseline.base_sha != spec.base_sha:
        if tests.status != "passed":
            return VerifyResult(
                verdict="tests-fail",
                patch_sha256=patch_sha,
                reproduction=repro,
                tests=tests,
                reason=_reason("tests-fail", tests),
            )
        return VerifyResult(
            verdict="verified", patch_sha256=patch_sha, reproduction=repro, tests=tests
        )
    base_outcomes = None
    if baseline.outcomes is not None:
        base_outcomes = test_outcomes.decode(
            read_evidence(actx.dep(EvidenceStore), baseline.outcomes)
        )
    passed = tests.status == "passed"
    comparison = compare(baseline.passed, base_outcomes, passed, outcomes)
    if not comparison.ok and comparison.regressions:
        # Once more: a test that fails once and then passes is flaky, not broken.
        rerun, again = await _run_tests(actx, ws, spec, request.test, limit, repro.environment)
        flaky = [t for t in comparison.regressions if (again or {}).get(t) == "passed"]
        if flaky:
            regressions = [t for t in comparison.regressions if t not in flaky]
            # A suite green on the base must be green again, not merely per test.
            green = not baseline.passed or rerun.status == "passed"
            comparison = comparison.model_copy(
                update={"regressions": regressions, "flaky": flaky, "ok": not regressions and green}
            )
    if not comparison.ok:
        return VerifyResult(
            verdict="tests-fail",
            patch_sha256=patch_sha,
            reproduction=repro,
            tests=tests,
            reason=_regression_reason(comparison, tests),
            comparison=comparison,
        )
    return VerifyResult(
        verdict="verified",
        patch_sha256=patch_sha,
        reproduction=repro,
        tests=tests,
        comparison=comparison,
    )


def _regression_reason(comparison: Comparison, tests: StepResult) -> str:
    if comparison.regressions:
        what = (
            f"{len(comparison.regressions)} test(s) that pass on the base commit fail with the "
            f"patch applied: {named(comparison.regressions)}"
        )
        failing = tests.failing
        tail = (failing.output_tail or failing.output_head) if failing is not None else ""
        return f"{what}.\n\n```text\n{tail.strip()}\n```"
    return _reason("tests-fail", tests) + " (they pass on the base commit)"


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


ACTIVITIES: list[ActivityDefn] = [run_reproduction, verify_candidate]
