"""An agent that fills the disk, through the whole run (issue 19).

The operator's command agent writes 1 MiB files into its $HOME until
something stops it. The sandbox stops it at the workspace's quota while it
runs (not after), the run ends with that reason in the status comment, the
disk holds no more than the quota and one polling period of writing, and
the worker goes on serving.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.demo.project import write_project
from app.demo.stack import LocalStack
from tests.e2e import scenario

DEMO_BUDGETS = "budgets: {repair_attempts: 3, time_limit_seconds: 120}\n"
QUOTA_MIB = 32
#: Never stops by itself: 1 MiB files, each far below the per-file limit.
FILL_THE_DISK = (
    "/bin/sh",
    "-c",
    'i=0; while :; do head -c 1048576 /dev/zero > "$HOME/fill-$i"; i=$((i+1)); done',
)


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    folder = write_project(tmp_path / "project")
    config = folder / ".github" / "repairbot.yml"
    text = config.read_text()
    assert DEMO_BUDGETS in text
    config.write_text(
        text.replace(DEMO_BUDGETS, "budgets: {repair_attempts: 1, time_limit_seconds: 120}\n")
    )
    return folder


def used_under(root: Path) -> int:
    return sum(f.lstat().st_blocks * 512 for f in root.rglob("*") if not f.is_symlink())


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_an_agent_filling_the_disk_is_stopped_and_the_run_says_why(
    stack: LocalStack,
) -> None:
    assert stack.settings is not None
    stack.start_repairbot(agent_command=FILL_THE_DISK, workspace_quota_mib=QUOTA_MIB)
    number = await scenario.open_labelled_issue(stack)

    run = await scenario.wait_end(stack, number, timeout=120)
    assert run.status == "completed", run.error
    body = await scenario.status_comment(stack, number)
    assert run.result["outcome"] == "budget-exhausted", run.result
    assert (
        f"agent-failed: the agent was stopped: the workspace exceeded its {QUOTA_MIB} MiB "
        "disk quota" in body
    ), body
    state = await scenario.github_state(stack, number)
    assert state["pulls"] == []
    # Stopped while it ran: one attempt, killed at the quota, not at the
    # agent's time limit, and the workspace is gone.
    assert len(scenario.scheduled(stack, number, "agent.propose_fix")) == 1
    workspaces = stack.settings.data_dir / "workspaces"
    if workspaces.exists():
        assert used_under(workspaces) < 8 << 20
    # The worker is unaffected: it answers the next issue.
    again = await scenario.open_labelled_issue(stack)
    assert (await scenario.wait_end(stack, again, timeout=120)).status == "completed"
