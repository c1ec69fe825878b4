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

from activities import setup_effects, test_outcomes
from activities._support import read_evidence
from activities.environments import (
    ENV_VAR,
    EnvironmentCache,
    Listing,
    capture,
    carry,
    dependency_files,
    dependency_files_at,
    environment_key,
)
from activities.test_outcomes import compare
from activities.unrunnable import cannot_run
from activities.workspace import Checkouts, PatchRejectedError, open_workspace
from app.contracts import repo_commands
from app.contracts.repo_commands import (
    MAX_NAMED,
    BaselineTests,
    Comparison,
    ReproductionResult,
    StepInput,
    StepResult,
    StepStatus,
    Verdict,
    VerifyInput,
    VerifyResult,
    named,
)
from app.contracts.step_environment import Environment
from app.contracts.workspace import WorkspaceSpec
from app.engine import (
    ActivityContext,
    PermanentError,
    implements,
)
from app.repo_config import Command
from app.sandbox.runner import CommandRun, run_command
from app.workspace import Workspace

#: What shells report for "not executable" and "not found".
_NOT_RUN = (126, 127)


async def run_step(
    actx: ActivityContext,
    checkouts: Checkouts,
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
    cache = EnvironmentCache(checkouts.settings.data_dir / "environments")
    repo = request.workspace.repo
    key = environment_key(repo, setup, await asyncio.to_thread(dependency_files, ws.repo))
    ready = cache.ready(key) if setup and environment is None else None
    entry = cache.entry(key) if ready is not None else None
    is_base = request.workspace.patch is None
    may_build = bool(setup) and request.reuse_env and is_base
    note = b""
    with contextlib.ExitStack() as stack:
        before: Listing | None = None
        if environment is not None:
            env = environment
        elif entry is not None and entry.unmovable is None and (request.reuse_env or not is_base):
            cache.touch(key)
            env = await asyncio.to_thread(carry, cache, key, entry, ws)
            note = _REUSED
        elif may_build and (built := stack.enter_context(cache.building(key))) is not None:
            env = Environment(path=built, reused=False, shared=True)
            before = await asyncio.to_thread(_listing, ws)
        elif setup and not is_base and (seeded := await _from_base(cache, ws, request, setup)):
            env, note = seeded, _RERUN
        else:
            env = Environment(path=ws.root / "env", reused=False, shared=False)
        env.path.mkdir(exist_ok=True)
        skip_setup = env.reused or environment is not None
        runs, status = await _run_commands(
            actx, checkouts, ws, request, env, [] if skip_setup else setup, [], kind, extra_env
        )
        if env.path == cache.root / key and not skip_setup and status == "passed":
            # Setup passed: later steps (and runs with these dependency files)
            # reuse it. Captured before the step's own commands run: what they
            # leave in the checkout is not setup's and is never carried.
            built_entry = await asyncio.to_thread(capture, cache, key, ws.repo, env.path, before)
            cache.record(key, built_entry)
            cache.mark_ready(key)
        if status == "passed":
            more, status = await _run_commands(
                actx, checkouts, ws, request, env, [], commands, kind, extra_env
            )
            runs += more
    log = checkouts.evidence.put(note + combined_log(runs), kind=f"{kind}-log", name=name)
    result = StepResult(
        status=status, results=[run.result for _, run in runs], log=log, reused_env=env.reused
    )
    result.environment = env
    return result


async def _run_commands(
    actx: ActivityContext,
    checkouts: Checkouts,
    ws: Workspace,
    request: StepInput,
    env: Environment,
    setup: list[Command],
    commands: list[Command],
    kind: str,
    extra_env: dict[str, str] | None,
) -> tuple[list[tuple[str, CommandRun]], StepStatus]:
    sandbox = checkouts.sandbox
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


_REUSED = (
    b"[setup skipped: the base's setup built the environment ($REPAIRBOT_ENV and what it "
    b"wrote into the checkout) for these dependency files; reused read-only or as a copy]\n\n"
)
_RERUN = (
    b"[the patch changes a dependency file: setup runs again, without network, in a "
    b"copy of the environment the base's setup built]\n\n"
)


def _listing(ws: Workspace) -> Listing | None:
    try:
        return setup_effects.listing(ws.repo)
    except setup_effects.TooManyEntries:
        return None


async def _from_base(
    cache: EnvironmentCache, ws: Workspace, request: StepInput, setup: list[Command]
) -> Environment | None:
    """For a candidate whose dependency files differ from its base's: a private,
    writable copy of the base's environment, if the base built one here."""
    base_files = await dependency_files_at(ws, request.workspace.base_sha)
    key = environment_key(request.workspace.repo, setup, base_files)
    entry = cache.entry(key) if cache.ready(key) is not None else None
    if entry is None or entry.unmovable is not None:
        return None
    return await asyncio.to_thread(carry, cache, key, entry, ws, writable=True)


def combined_log(runs: list[tuple[str, CommandRun]]) -> bytes:
    """One readable log: each command, its output, and how it ended."""
    parts = []
    for label, run in runs:
        result = run.result
        if result.quota_exceeded is not None:
            ending = f"[killed: {result.quota_exceeded}]"
        elif result.timed_out:
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


async def _run_tests(
    actx: ActivityContext,
    checkouts: Checkouts,
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
        checkouts,
        ws,
        StepInput(workspace=spec, commands=[test], time_limit_seconds=limit),
        kind="test",
        name=_name(spec, "test"),
        extra_env=test_outcomes.report_options(ws.tmp),
        environment=environment,
    )
    outcomes = await asyncio.to_thread(test_outcomes.read_report, ws.tmp)
    if outcomes is None:  # not pytest: unittest's verbose lines, if that is what ran
        log = read_evidence(checkouts.evidence, step.log)
        outcomes = test_outcomes.parse_unittest(log.decode(errors="replace"))
    return step, outcomes


async def _baseline(
    actx: ActivityContext,
    checkouts: Checkouts,
    ws: Workspace,
    request: StepInput,
    test: Command,
    environment: Environment | None,
) -> BaselineTests:
    spec = request.workspace
    limit = request.time_limit_seconds
    step, outcomes = await _run_tests(actx, checkouts, ws, spec, test, limit, environment)
    failing = sorted(t for t, o in (outcomes or {}).items() if o == "failed")
    ref = None
    if outcomes is not None:
        store = checkouts.evidence
        ref = store.put(test_outcomes.encode(outcomes), kind="test-outcomes", name="base.json")
    result = step.failing
    return BaselineTests(
        base_sha=spec.base_sha,
        step=step,
        passed=step.status == "passed",
        outcomes=ref,
        failing=failing[:MAX_NAMED],
        failing_count=len(failing),
        cannot_run=cannot_run(result) if result is not None else None,
    )


# -- verify_candidate ---------------------------------------------------------


async def _verify(
    actx: ActivityContext,
    checkouts: Checkouts,
    ws: Workspace,
    request: VerifyInput,
    patch_sha: str,
) -> VerifyResult:
    spec = request.workspace
    repro = await run_step(
        actx,
        checkouts,
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
    tests, outcomes = await _run_tests(
        actx, checkouts, ws, spec, request.test, limit, repro.environment
    )
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
        base_outcomes = test_outcomes.decode(read_evidence(checkouts.evidence, baseline.outcomes))
    passed = tests.status == "passed"
    comparison = compare(baseline.passed, base_outcomes, passed, outcomes)
    if not comparison.ok and comparison.regressions:
        # Once more: a test that fails once and then passes is flaky, not broken.
        rerun, again = await _run_tests(
            actx, checkouts, ws, spec, request.test, limit, repro.environment
        )
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


class RepoCommandActivities:
    def __init__(self, checkouts: Checkouts) -> None:
        self.checkouts = checkouts

    @implements(repo_commands.run_reproduction)
    async def run_reproduction(
        self, actx: ActivityContext, request: StepInput
    ) -> ReproductionResult:
        """Run the reproduction. On the base commit it must fail for the bug to count."""
        checkouts = self.checkouts
        async with open_workspace(actx, checkouts, request.workspace) as ws:
            step = await run_step(
                actx,
                checkouts,
                ws,
                request,
                kind="reproduce",
                name=_name(request.workspace, "reproduce"),
            )
            baseline = None
            if request.baseline_test is not None and step.status != "setup-failed":
                baseline = await _baseline(
                    actx, checkouts, ws, request, request.baseline_test, step.environment
                )
        failing = step.failing
        problem = cannot_run(failing) if failing is not None and step.status == "failed" else None
        reproduced = (
            step.status == "failed"
            and failing is not None
            and (failing.timed_out or failing.exit_code not in _NOT_RUN)
            # Stopped by the disk quota: the command never got to show the bug.
            and failing.quota_exceeded is None
        )
        if request.baseline_test is not None:  # the caller tells broken commands apart
            reproduced = reproduced and problem is None
        result = ReproductionResult(
            **step.model_dump(), reproduced=reproduced, cannot_run=problem, baseline=baseline
        )
        return result

    @implements(repo_commands.verify_candidate)
    async def verify_candidate(self, actx: ActivityContext, request: VerifyInput) -> VerifyResult:
        """Fresh workspace from base + patch: the reproduction must now pass, and the tests."""
        checkouts = self.checkouts
        patch = request.workspace.patch
        if patch is None:
            raise PermanentError(
                "verify_candidate needs workspace.patch: there is nothing to verify"
            )
        try:
            async with open_workspace(actx, checkouts, request.workspace) as ws:
                result = await _verify(actx, checkouts, ws, request, patch.sha256)
        except PatchRejectedError as exc:
            result = VerifyResult(
                verdict="patch-rejected", patch_sha256=patch.sha256, reason=str(exc)
            )
        return result
