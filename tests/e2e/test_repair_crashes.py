"""The worker is killed with SIGKILL at each phase boundary and in the middle
of publication; a fresh worker finishes the run. Every run ends merged with
exactly one branch, one pull request, one status comment and one merge, as
read from the emulated GitHub."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.demo.project import FIXED_LINE, fix_agent_command, write_project
from app.demo.run import WorkerProcess
from app.demo.stack import LocalStack
from tests.e2e.scenario import file_on_branch, github_state, run_through_a_kill

# Each point kills the worker right after that activity's effect, before its
# result is recorded (or inside a workflow-task commit).
FAULTS = [
    "activity.before_complete:workspace.prepare",
    "activity.before_complete:commands.run_reproduction",
    "activity.before_complete:agent.propose_fix",
    "activity.before_complete:commands.verify_candidate",
    "activity.before_complete:github.build_commit",
    "activity.before_complete:github.push_branch",  # the branch moved; we don't know yet
    "activity.before_complete:github.pull_request",  # the PR exists; we don't know yet
    "activity.before_complete:github.check_run",
    "activity.before_complete:github.comment@2",  # a status comment update
    "activity.before_complete:github.merge",  # merged; we don't know yet
    "workflow_task.mid_commit@6",
]
# PostgreSQL gets the mid-publication cases; SQLite all of them.
ON_POSTGRES = [
    "activity.before_complete:github.push_branch",
    "activity.before_complete:github.merge",
]


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    return write_project(tmp_path / "project")


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("fault", FAULTS)
async def test_run_survives_a_worker_killed_at(
    stack: LocalStack, fault: str, tmp_path: Path
) -> None:
    await crash_and_finish(stack, fault, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(
    "db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
@pytest.mark.parametrize("fault", ON_POSTGRES)
async def test_run_survives_a_worker_killed_at_on_postgres(
    stack: LocalStack, fault: str, tmp_path: Path
) -> None:
    await crash_and_finish(stack, fault, tmp_path)


async def crash_and_finish(stack: LocalStack, fault: str, tmp_path: Path) -> None:
    assert stack.settings is not None
    settings = stack.settings.with_overrides(
        agent_command=tuple(fix_agent_command()),
        relay_grace=0.2,
        reconcile_interval=0.1,
        worker_silence=2.0,
    )
    stack.settings = settings
    stack.start_repairbot(run_worker=False)
    doomed = WorkerProcess(settings.with_overrides(fault_point=fault), tmp_path / "doomed.log")
    fresh = WorkerProcess(settings, tmp_path / "fresh.log")
    number, run = await run_through_a_kill(stack, doomed, fresh, timeout=90)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "merged"
    state = await github_state(stack, number)
    assert len(state["status_comments"]) == 1
    assert [p["merged_at"] is not None for p in state["pulls"]] == [True]
    assert state["branches"] == ["main"]  # deleted after the merge
    assert FIXED_LINE in file_on_branch(stack, "main", "slugify/__init__.py")
