"""The repair, config-check and onboarding workflows are declared from their
type hints; what they return (and what the repair's ``status`` query
answers) is the JSON they returned as dicts, so recorded results and their
readers (dashboard, ``repairbot runs``, describe) are unchanged."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.contracts.config_check import ConfigCheckRequest, ConfigCheckResult
from app.contracts.onboarding import OnboardRequest, OnboardResult
from app.contracts.requests import RunRequest
from app.engine import WorkflowContext, typed_workflow
from app.engine._determinism import check_module_source
from app.engine._errors import DeterminismViolation
from app.engine._history import RecordedEvent
from app.engine._registry import ENGINE_CANCEL_PHASES, LEGACY_CANCEL_PHASES, Registry
from app.engine._replay import Outcome, WorkflowExecution
from app.main.catalog import build_registry
from app.workflows import config_check, onboarding, repair_runs, slash_command, triage
from app.workflows.config_check import config_check_run
from app.workflows.onboarding import onboard
from app.workflows.repair import repair
from app.workflows.state import PullState, RunState, RunSummary, Usage

HISTORIES = Path(__file__).parent.parent / "histories"


def _state(**changes: object) -> RunState:
    state = RunState(
        run_id="repair:o/r#1/1",
        policy_version="p",
        repo="o/r",
        issue_number=1,
        base_branch="main",
    )
    return state.model_copy(update=changes)


@pytest.mark.parametrize(
    "state",
    [
        _state(),
        _state(
            outcome="merged",
            usage=Usage(attempts=2),
            pull=PullState(number=5, url="https://x/pull/5", state="merged"),
            pushed=["b" * 40],
        ),
    ],
    ids=["no-pull", "merged"],
)
def test_the_summary_is_the_state_json_then_its_three_top_level_fields(state: RunState) -> None:
    # What ``summary()`` returned as a dict, byte for byte (key order included).
    before = state.model_dump(mode="json") | {
        "attempts": state.usage.attempts,
        "pull_number": state.pull.number if state.pull else None,
        "pull_url": state.pull.url if state.pull else None,
    }
    assert json.dumps(state.summary().model_dump(mode="json")) == json.dumps(before)


def test_the_workflows_declare_their_models() -> None:
    assert (repair.input_type, repair.result_type) == (RunRequest, RunSummary)
    assert (onboard.input_type, onboard.result_type) == (OnboardRequest, OnboardResult)
    assert (config_check_run.input_type, config_check_run.result_type) == (
        ConfigCheckRequest,
        ConfigCheckResult,
    )


def test_the_small_results_keep_their_json() -> None:
    assert ConfigCheckResult(outcome="unchanged").model_dump(mode="json") == {
        "outcome": "unchanged"
    }
    assert OnboardResult(outcome="configured", pull_number=None).model_dump(mode="json") == {
        "outcome": "configured",
        "pull_number": None,
    }


def test_the_repair_keeps_the_cancel_phases_its_runs_recorded() -> None:
    assert repair.allowed_cancel_phases() == (*ENGINE_CANCEL_PHASES, *LEGACY_CANCEL_PHASES)


def test_the_determinism_check_reads_the_typed_workflow_itself() -> None:
    # ``typed_workflow`` registers a wrapper; the check must see the code it wraps.
    @typed_workflow("reads-the-clock")
    async def reads_the_clock(ctx: WorkflowContext, input: OnboardRequest) -> OnboardResult:
        return OnboardResult(outcome=str(time.time()), pull_number=None)

    with pytest.raises(DeterminismViolation, match=r"time\.time"):
        Registry.of([reads_the_clock])
    for module in (config_check, onboarding, repair_runs, slash_command, triage):
        check_module_source(module)  # their helpers are workflow code too


def _replayed(history: dict[str, Any]) -> Outcome:
    defn = build_registry().workflow(history["workflow"], int(history["version"]))
    execution = WorkflowExecution(
        defn, run_id=history["run_id"], workflow_id=history["workflow_id"]
    )
    try:
        step = execution.apply(
            [RecordedEvent.from_json(e) for e in history["events"]],
            task_time=datetime(2026, 12, 6, tzinfo=UTC),
        )
    finally:
        execution.close()
    assert step.outcome is not None
    return step.outcome


@pytest.mark.parametrize(
    "path", sorted(HISTORIES.glob("repair_v2_*.json")), ids=lambda path: path.stem
)
def test_a_replayed_repair_ends_as_it_was_recorded(path: Path) -> None:
    # The replay harness checks commands only: a run that now fails where it
    # ended (say, entering a cancel phase it no longer declares) shows here.
    history = json.loads(path.read_text())
    assert _replayed(history).status == history["status"]


def _recorded_result(path: Path) -> Any:
    events = json.loads(path.read_text())["events"]
    completed = [e for e in events if e["type"] == "workflow_completed"]
    return completed[0]["data"].get("result") if completed else None


#: The recorded repair runs that ended with a result (cancelled ones have none).
WITH_RESULTS = [p for p in sorted(HISTORIES.glob("repair_v2_*.json")) if _recorded_result(p)]


def test_recorded_repairs_with_results_are_there() -> None:
    assert len(WITH_RESULTS) >= 5


@pytest.mark.parametrize("path", WITH_RESULTS, ids=lambda path: path.stem)
def test_a_replayed_repair_returns_its_recorded_result_shape(path: Path) -> None:
    recorded = _recorded_result(path)
    replayed = _replayed(json.loads(path.read_text())).result
    # Fields added since the recording sit between, in the state's order.
    assert [key for key in replayed if key in recorded] == list(recorded)
    assert RunSummary.model_validate(replayed).model_dump(mode="json") == replayed
    for key in ("run_id", "outcome", "attempts", "pull_number", "pull_url", "merge_commit_sha"):
        assert replayed[key] == recorded[key]
