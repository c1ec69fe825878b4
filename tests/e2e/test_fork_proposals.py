"""Unreviewed agent code never lands where the repository's CI runs with its
secrets: proposals are pushed to the proposal organization's fork and the
draft pull request comes from there; only the approved, sha-pinned merge
brings the code into the base repository. Read from the emulated GitHub."""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.github import GitHubActivities
from app.demo.project import FIXED_LINE, fix_agent_command, write_project
from app.demo.stack import LocalStack
from emulator.git import BareRepo
from tests.e2e.scenario import (
    activity_results,
    file_on_branch,
    github_state,
    open_labelled_issue,
    record_history,
    review,
    wait_end,
    wait_for,
    wait_phase,
    wait_status_comment,
    workflow_id,
)
from tests.e2e.test_repair_crashes import crash_and_finish


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    return write_project(tmp_path / "project")


def base_branches(stack: LocalStack) -> list[str]:
    """Every branch of the base repository, from the emulator's git itself."""
    assert stack.emulator is not None
    repo = stack.emulator.store.repo(stack.people.owner, stack.repo_name)
    assert repo is not None
    return sorted(BareRepo(repo.path).list_refs("refs/heads/"))


def fork_branches(stack: LocalStack) -> list[str]:
    assert stack.emulator is not None
    fork = stack.emulator.store.repo(stack.people.proposals, stack.repo_name)
    assert fork is not None, "no proposal fork"
    return sorted(BareRepo(fork.path).list_refs("refs/heads/"))


async def test_proposal_lives_in_the_fork_until_the_approved_merge(stack: LocalStack) -> None:
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    branch = f"repairbot/issue-{number}"

    # Before approval: the base repository has no branch of the run.
    assert base_branches(stack) == ["refs/heads/main"]
    assert f"refs/heads/{branch}" in fork_branches(stack)
    assert stack.emulator is not None
    fork = stack.emulator.store.repo(stack.people.proposals, stack.repo_name)
    assert fork is not None and fork.parent is not None
    assert fork.parent.full_name == stack.repo
    state = await github_state(stack, number)
    [pull] = state["pulls"]
    assert pull["number"] == status["pull_number"] and pull["draft"] is True
    assert pull["head"]["repo"]["full_name"] == stack.proposal_repo
    assert pull["head"]["repo"]["fork"] is True
    assert pull["head"]["label"] == f"{stack.people.proposals}:{branch}"
    assert FIXED_LINE in file_on_branch(stack, branch, "slugify/__init__.py")
    await wait_status_comment(stack, number, f"Branch: `{stack.proposal_repo}:{branch}`")

    await review(stack, pull["number"], "APPROVE")
    run = await wait_end(stack, number)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "merged"
    assert FIXED_LINE in file_on_branch(stack, "main", "slugify/__init__.py")
    # Cleaned up in the fork; the base never had the branch.
    assert f"refs/heads/{branch}" not in fork_branches(stack)
    assert base_branches(stack) == ["refs/heads/main"]
    assert activity_results(stack, number, "github.proposal_repo") == [
        {"repo": stack.proposal_repo, "refused": None}
    ]
    record_history(stack, number, "repair_v2_fork_proposal_merged")
    # The same run, kept again once it skipped the reads it knows the answer
    # to (patch ``skip-reads-the-run-knows``): the file above stays as it was
    # recorded before, for runs of that time.
    record_history(stack, number, "repair_v2_fork_proposal_merged_known_reads")


async def parks_without_publishing(stack: LocalStack, number: int) -> None:
    """The run waits for a human; nothing was pushed or opened anywhere."""
    runtime = stack.runtime
    assert runtime is not None

    def parked() -> bool:
        run = runtime.store.find_run(workflow_id(stack, number))
        return run is not None and run.status == "needs-human"

    await wait_for("the run parks for a human", parked)
    state = await github_state(stack, number)
    assert state["pulls"] == []
    assert base_branches(stack) == ["refs/heads/main"]
    assert stack.emulator is not None
    assert [r for r in stack.emulator.store.repos.values() if r.parent is not None] == []


async def test_no_proposal_owner_refuses_to_publish(stack: LocalStack) -> None:
    stack.start_repairbot(agent_command=tuple(fix_agent_command()), proposal_owner="")
    number = await open_labelled_issue(stack)
    body = await wait_status_comment(stack, number, "REPAIRBOT_PROPOSAL_OWNER", timeout=60)
    assert "REPAIRBOT_PROPOSALS_IN_BASE_REPOSITORY=true" in body
    await parks_without_publishing(stack, number)

    # The operator configures the proposal organization and resumes the run:
    # it publishes from the fork without working again.
    runtime, settings = stack.runtime, stack.settings
    assert runtime is not None and settings is not None
    # (the worker restarted with it: its GitHub activities get the new settings)
    clients = stack.clients
    assert clients is not None
    configured = settings.with_overrides(proposal_owner=stack.people.proposals)
    runtime.registry.register_activities(
        GitHubActivities(clients.github, clients.evidence, configured)
    )
    run = runtime.store.find_run(workflow_id(stack, number))
    assert run is not None
    assert await runtime.resume(run.run_id, "configured REPAIRBOT_PROPOSAL_OWNER", by="ops")
    await wait_phase(stack, number, "awaiting-review")
    [pull] = (await github_state(stack, number))["pulls"]
    assert pull["head"]["repo"]["full_name"] == stack.proposal_repo
    assert base_branches(stack) == ["refs/heads/main"]
    assert len(activity_results(stack, number, "agent.propose_fix")) == 1


async def test_a_proposal_owner_without_the_app_parks_the_run_saying_so(
    stack: LocalStack,
) -> None:
    await stack.gh.create_user("ghost-org", type="Organization")  # the App is not there
    stack.start_repairbot(agent_command=tuple(fix_agent_command()), proposal_owner="ghost-org")
    number = await open_labelled_issue(stack)
    body = await wait_status_comment(stack, number, "not installed on ghost-org", timeout=60)
    assert "can be resumed" in body
    await parks_without_publishing(stack, number)


async def test_the_operator_may_opt_in_to_branches_of_the_base(stack: LocalStack) -> None:
    stack.start_repairbot(
        agent_command=tuple(fix_agent_command()),
        proposal_owner="",
        proposals_in_base_repository=True,
    )
    number = await open_labelled_issue(stack)
    await wait_phase(stack, number, "awaiting-review")
    assert f"refs/heads/repairbot/issue-{number}" in base_branches(stack)
    [pull] = (await github_state(stack, number))["pulls"]
    assert pull["head"]["repo"]["full_name"] == stack.repo


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    "fault",
    [
        "activity.before_complete:github.proposal_repo",  # the fork exists; not recorded
        "activity.before_complete:github.push_branch",  # pushed to the fork; no PR yet
        "activity.before_complete:github.pull_request",  # the fork's PR exists; not recorded
    ],
)
async def test_a_kill_between_fork_push_and_pull_request_leaves_one_pull_request(
    stack: LocalStack, fault: str, tmp_path: Path
) -> None:
    # One branch (deleted after the merge), one pull request, one status comment.
    number = await crash_and_finish(stack, fault, tmp_path)
    [pull] = (await github_state(stack, number))["pulls"]
    assert pull["head"]["repo"]["full_name"] == stack.proposal_repo
    assert base_branches(stack) == ["refs/heads/main"]
    assert fork_branches(stack) == ["refs/heads/main"]  # the run's branch deleted
    assert stack.emulator is not None
    forks = [r for r in stack.emulator.store.repos.values() if r.parent is not None]
    assert [f.full_name for f in forks] == [stack.proposal_repo]
