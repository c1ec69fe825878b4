"""Driving the repair end to end as people would, and reading GitHub's state."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from app.demo.project import ISSUE_BODY, ISSUE_TITLE
from app.demo.stack import LocalStack
from app.engine.store import RunRow
from app.workflows.ids import repair_workflow_id


async def open_labelled_issue(stack: LocalStack, *, label_as: str | None = None) -> int:
    people = stack.people
    issue = await stack.gh.create_issue(
        people.owner, stack.repo_name, as_user=people.owner, title=ISSUE_TITLE, body=ISSUE_BODY
    )
    number = int(issue["number"])
    await stack.gh.add_label(
        people.owner, stack.repo_name, number, "repairbot", as_user=label_as or people.maintainer
    )
    return number


def workflow_id(stack: LocalStack, number: int) -> str:
    return repair_workflow_id(stack.repo, number)


async def wait_phase(stack: LocalStack, number: int, phase: str, timeout: float = 60) -> Any:
    """Poll the run's status query until it reports ``phase``."""
    assert stack.runtime is not None
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        run = stack.runtime.store.find_run(workflow_id(stack, number))
        if run is not None and run.status not in ("running", "cancelling"):
            raise AssertionError(
                f"run ended ({run.status}: {run.result or run.error}) before phase {phase}"
            )
        if run is not None:
            last = stack.runtime.query(run.run_id, "status")
            if last.get("phase") == phase and (
                phase != "awaiting-review" or last.get("pull_number")
            ):
                return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"phase {phase} not reached in {timeout}s; last status {last}")


async def wait_end(stack: LocalStack, number: int, timeout: float = 60) -> RunRow:
    assert stack.runtime is not None
    await stack.gh.deliveries.wait()
    return await stack.runtime.wait_for(workflow_id(stack, number), timeout=timeout)


async def github_state(stack: LocalStack, number: int) -> dict[str, Any]:
    """What GitHub holds (read from the emulator, not from repairbot)."""
    owner, repo, who = stack.people.owner, stack.repo_name, stack.people.owner
    comments = await stack.gh.rest(
        "GET", f"/repos/{owner}/{repo}/issues/{number}/comments", as_user=who
    )
    pulls = await stack.gh.rest("GET", f"/repos/{owner}/{repo}/pulls?state=all", as_user=who)
    branches = await stack.gh.rest("GET", f"/repos/{owner}/{repo}/branches", as_user=who)
    status = [c for c in comments if "repairbot:op=" in c["body"] and "status" in c["body"]]
    return {
        "comments": comments,
        "status_comments": status,
        "pulls": pulls,
        "branches": sorted(b["name"] for b in branches),
    }


def file_on_branch(stack: LocalStack, branch: str, path: str) -> str:
    """A file's content at a branch, read from the emulator's bare repository."""
    from emulator.git import BareRepo

    assert stack.emulator is not None
    repo = stack.emulator.store.repo(stack.people.owner, stack.repo_name)
    assert repo is not None
    git = BareRepo(repo.path)
    sha = git.resolve(branch)
    assert sha is not None, f"no branch {branch}"
    content = git.read_file(sha, path)
    assert content is not None, f"no {path} at {branch}"
    return content.decode()
