"""Repository commands run in a workspace: the reproduction (and the tests on
the base, the baseline), and a candidate's verification; with the test
comparison a verdict carries."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.contracts.step_environment import Environment
from app.contracts.workspace import WorkspaceSpec
from app.engine import RetryPolicy, Timeouts, activity_contract
from app.evidence import EvidenceRef
from app.repo_config import Command
from app.sandbox.runner import CommandResult

#: At most this many test names are quoted in a comment or a reason.
MAX_NAMED = 10


class Comparison(BaseModel):
    """What a candidate's test run changed against the base's."""

    #: Whether the candidate's tests are acceptable.
    ok: bool
    #: Whether the test command passed outright with the candidate.
    candidate_passed: bool
    #: ``per-test`` (both reports read) or ``exit-status`` (fallback).
    basis: Literal["per-test", "exit-status"]
    #: Tests that passed on the base (or did not exist) and fail with the candidate.
    regressions: list[str] = []
    #: Tests that fail on the base and still fail (not blamed on the fix).
    still_failing: list[str] = []
    #: Tests that fail on the base and pass with the candidate.
    fixed: list[str] = []
    #: Tests that failed with the candidate once and passed when run again.
    flaky: list[str] = []


def named(tests: list[str]) -> str:
    """Up to :data:`MAX_NAMED` test ids in backticks, with a count of the rest."""
    shown = ", ".join(f"`{t}`" for t in tests[:MAX_NAMED])
    more = len(tests) - MAX_NAMED
    return shown + (f" and {more} more" if more > 0 else "")


StepStatus = Literal["passed", "failed", "setup-failed"]

#: Commands may run for hours in total; heartbeats (every few seconds) are what
#: notice a dead worker, within the heartbeat timeout.
COMMAND_TIMEOUTS = Timeouts(start_to_close=6 * 3600, heartbeat=60)
COMMAND_RETRY = RetryPolicy(initial_interval=5.0, max_interval=120.0, max_attempts=3)


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


run_reproduction = activity_contract(
    "commands.run_reproduction",
    StepInput,
    ReproductionResult,
    retry=COMMAND_RETRY,
    timeouts=COMMAND_TIMEOUTS,
)
verify_candidate = activity_contract(
    "commands.verify_candidate",
    VerifyInput,
    VerifyResult,
    retry=COMMAND_RETRY,
    timeouts=COMMAND_TIMEOUTS,
)
