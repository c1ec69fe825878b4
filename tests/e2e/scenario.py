"""Driving the repair end to end as people would, and reading GitHub's state."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.contracts.ids import issue_of_branch, repair_workflow_id
from app.demo.project import ISSUE_BODY, ISSUE_TITLE
from app.demo.run import WorkerProcess
from app.demo.stack import LocalStack
from app.engine._store import RunRow


async def open_labelled_issue(
    stack: LocalStack, *, label_as: str | None = None, body: str = ISSUE_BODY
) -> int:
    people = stack.people
    issue = await stack.gh.create_issue(
        people.owner, stack.repo_name, as_user=people.owner, title=ISSUE_TITLE, body=body
    )
    number = int(issue["number"])
    await stack.gh.add_label(
        people.owner, stack.repo_name, number, "repairbot", as_user=label_as or people.maintainer
    )
    return number


def workflow_id(stack: LocalStack, number: int) -> str:
    return repair_workflow_id(stack.gh.repo_id(stack.repo), number)


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
    base_branches = sorted(b["name"] for b in branches)
    # repairbot's branches live in the proposal organization's fork.
    run_branches = [b for b in proposal_branches(stack) if issue_of_branch(b) is not None]
    # The run's status comment carries the marker of its ``status`` step (a
    # command's reply may mention "status" in its text).
    status = [c for c in comments if re.search(r"repairbot:op=\S+:status[ \t]*-->", c["body"])]
    return {
        "comments": comments,
        "status_comments": status,
        "pulls": pulls,
        # The base repository's branches and the run branches of the fork.
        "branches": sorted(base_branches + run_branches),
        "base_branches": base_branches,
    }


def proposal_branches(stack: LocalStack) -> list[str]:
    """Branches of the proposal fork ([] while there is no fork)."""
    from emulator.git import BareRepo

    assert stack.emulator is not None
    fork = stack.emulator.store.repo(stack.people.proposals, stack.repo_name)
    if fork is None:
        return []
    refs = BareRepo(fork.path).list_refs("refs/heads/")
    return sorted(name.removeprefix("refs/heads/") for name in refs)


async def check_runs(stack: LocalStack, sha: str) -> list[dict[str, Any]]:
    """The check runs on a commit, as GitHub shows them."""
    owner, repo, who = stack.people.owner, stack.repo_name, stack.people.owner
    listed = await stack.gh.rest(
        "GET", f"/repos/{owner}/{repo}/commits/{sha}/check-runs", as_user=who
    )
    runs: list[dict[str, Any]] = listed["check_runs"]
    return runs


async def final_check(stack: LocalStack, sha: str) -> dict[str, Any]:
    """repairbot's one check run on ``sha``; it must be completed."""
    ours = [run for run in await check_runs(stack, sha) if run["name"] == "repairbot"]
    assert len(ours) == 1, ours
    assert ours[0]["status"] == "completed", ours[0]
    return ours[0]


HISTORIES = Path(__file__).parent.parent / "histories"


def record_history(stack: LocalStack, number: int, name: str) -> None:
    """With ``REPAIRBOT_RECORD_HISTORIES=1``, keep the run's history as a golden
    history (``tests/histories/<name>.json``) that CI replays on every change."""
    if os.environ.get("REPAIRBOT_RECORD_HISTORIES") != "1":
        return
    from app.engine._history import export_history

    assert stack.runtime is not None
    history = export_history(stack.runtime.store, workflow_id(stack, number))
    (HISTORIES / f"{name}.json").write_text(json.dumps(history, indent=1) + "\n")


def file_on_branch(stack: LocalStack, branch: str, path: str) -> str:
    """A file's content at a branch, read from the emulator's bare repository
    (repairbot's branches: from the proposal fork)."""
    git = _bare_repo(stack, branch)
    sha = git.resolve(f"refs/heads/{branch}")
    assert sha is not None, f"no branch {branch}"
    content = git.read_file(sha, path)
    assert content is not None, f"no {path} at {branch}"
    return content.decode()


# -- more of GitHub's state, read from the emulator ---------------------------------


def home_of(stack: LocalStack, branch: str) -> tuple[str, str]:
    """The repository a branch lives in: repairbot's in the proposal fork."""
    if issue_of_branch(branch) is not None:
        return stack.people.proposals, stack.repo_name
    return stack.people.owner, stack.repo_name


def _bare_repo(stack: LocalStack, branch: str) -> Any:
    from emulator.git import BareRepo

    assert stack.emulator is not None
    repo = stack.emulator.store.repo(*home_of(stack, branch))
    assert repo is not None
    return BareRepo(repo.path)


def branch_sha(stack: LocalStack, branch: str) -> str | None:
    """Where a branch points in the emulator's git (None: no such branch)."""
    assert stack.emulator is not None
    if stack.emulator.store.repo(*home_of(stack, branch)) is None:
        return None
    sha: str | None = _bare_repo(stack, branch).resolve(f"refs/heads/{branch}")
    return sha


def first_parent_history(stack: LocalStack, branch: str) -> list[str]:
    """Commit messages' first lines along the branch's first-parent chain, newest first."""
    git = _bare_repo(stack, branch)
    sha = git.resolve(f"refs/heads/{branch}")
    subjects: list[str] = []
    while sha is not None:
        info = git.commit_info(sha)
        subjects.append(info.message.splitlines()[0] if info.message else "")
        sha = info.parents[0] if info.parents else None
    return subjects


async def status_comment(stack: LocalStack, number: int) -> str:
    """The body of the run's one status comment on the issue ("" before it exists)."""
    found = (await github_state(stack, number))["status_comments"]
    assert len(found) <= 1, f"more than one status comment: {found}"
    return str(found[0]["body"]) if found else ""


async def wait_status_comment(
    stack: LocalStack, number: int, text: str, timeout: float = 30
) -> str:
    """Poll the issue on GitHub until the status comment says ``text``."""
    deadline = time.monotonic() + timeout
    body = ""
    while time.monotonic() < deadline:
        body = await status_comment(stack, number)
        if text in body:
            return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"status comment never said {text!r} in {timeout}s; last:\n{body}")


async def review(
    stack: LocalStack,
    pull_number: int,
    event: str,
    *,
    as_user: str | None = None,
    body: str = "",
    commit_id: str | None = None,
) -> dict[str, Any]:
    """A review of the pull request, by the maintainer unless told otherwise."""
    return await stack.gh.review(
        stack.people.owner,
        stack.repo_name,
        pull_number,
        as_user=as_user or stack.people.maintainer,
        event=event,
        body=body,
        commit_id=commit_id,
    )


async def push_files(
    stack: LocalStack, branch: str, files: dict[str, str | None], *, as_user: str | None = None
) -> str:
    """A human's commit on ``branch`` (the maintainer's unless told otherwise); its sha.

    On repairbot's branch (in the proposal fork) the human is made a member
    with write access there first: nobody else can push to it."""
    who = as_user or stack.people.maintainer
    owner, repo = home_of(stack, branch)
    if owner != stack.people.owner:
        await stack.gh.set_permission(owner, repo, who, "write")
    await stack.gh.push_as(who, owner, repo, branch, files, message=f"Edit {', '.join(files)}")
    sha = branch_sha(stack, branch)
    assert sha is not None
    return sha


async def delete_branch_as(stack: LocalStack, branch: str, *, as_user: str) -> None:
    """A human deletes ``branch`` through the REST API (repairbot's: in the
    proposal fork, where the human is first given write access)."""
    owner, repo = home_of(stack, branch)
    if owner != stack.people.owner:
        await stack.gh.set_permission(owner, repo, as_user, "write")
    await stack.gh.rest("DELETE", f"/repos/{owner}/{repo}/git/refs/heads/{branch}", as_user=as_user)


# -- what repairbot recorded (for counts GitHub cannot show) --------------------------


def scheduled(stack: LocalStack, number: int, activity: str) -> list[str]:
    """Operation ids of the ``activity`` calls in the run's history, in order."""
    assert stack.runtime is not None
    run = stack.runtime.store.find_run(workflow_id(stack, number))
    assert run is not None
    return [
        str(event.data["operation_id"])
        for event in stack.runtime.store.load_events(run.run_id)
        if event.type == "activity_scheduled" and event.data.get("activity") == activity
    ]


def activity_results(stack: LocalStack, number: int, activity: str) -> list[Any]:
    """The results the run accepted from its ``activity`` calls, in order."""
    assert stack.runtime is not None
    run = stack.runtime.store.find_run(workflow_id(stack, number))
    assert run is not None
    return [
        event.data["result"]
        for event in stack.runtime.store.load_events(run.run_id)
        if event.type == "activity_completed" and event.data.get("activity") == activity
    ]


async def wait_for(
    what: str, check: Callable[[], Awaitable[bool] | bool], timeout: float = 30
) -> None:
    """Poll ``check`` until it holds (instead of sleeping a guessed time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        outcome = check()
        if outcome if isinstance(outcome, bool) else await outcome:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout}s")


def heartbeat_every(stack: LocalStack, seconds: float) -> None:
    """Make running commands heartbeat (and so notice cancellation) every ``seconds``.

    The worker's default is 10 s, right for production and slow for a test.
    Call after ``start_repairbot`` and before the first activity runs.
    """
    from app.main.worker_process import checkout_activities
    from app.sandbox.runner import Sandbox

    assert stack.runtime is not None and stack.clients is not None
    checkouts = replace(stack.clients.checkouts, sandbox=Sandbox(heartbeat_interval=seconds))
    for activities in checkout_activities(checkouts, stack.clients.agent):
        stack.runtime.registry.register_activities(activities)


async def run_through_a_kill(
    stack: LocalStack,
    doomed: WorkerProcess,
    fresh: WorkerProcess,
    *,
    timeout: float,
    before_fresh: Callable[[], None] | None = None,
    killer: asyncio.Task[None] | None = None,
) -> tuple[int, RunRow]:
    """Open a labelled issue while ``doomed`` (a worker set to die at a fault
    point) is running; once it died, start ``fresh`` (``before_fresh`` runs
    first); approve the proposal when it waits for review; return the issue
    number and the run once it ended. Both workers are stopped on the way out.

    ``killer``: the test's task that kills ``doomed`` once it sees its moment;
    if it fails (the moment never came), that failure is raised at once, with
    the doomed worker's log, instead of waiting out ``timeout`` for a run
    that cannot end."""
    assert stack.runtime is not None
    runtime = stack.runtime
    doomed.start()
    try:
        number = await open_labelled_issue(stack)
        approved = False
        deadline = time.monotonic() + timeout
        while True:
            assert time.monotonic() < deadline, (
                f"run did not finish; doomed log:\n{doomed.log_path.read_text()[-3000:]}\n"
                f"fresh log:\n{fresh.log_path.read_text()[-3000:] if fresh.process else ''}"
            )
            if killer is not None and killer.done() and not killer.cancelled():
                failed = killer.exception()
                if failed is not None:
                    raise AssertionError(
                        f"the kill failed: {failed!r}; doomed log:\n"
                        f"{doomed.log_path.read_text()[-3000:]}"
                    ) from failed
            if doomed.process and doomed.process.poll() is not None and fresh.process is None:
                if before_fresh is not None:
                    before_fresh()
                fresh.start()
            run = runtime.store.find_run(workflow_id(stack, number))
            if run is not None and run.status not in ("running", "cancelling"):
                break
            if run is not None and not approved:
                status = runtime.query(run.run_id, "status")
                if status.get("phase") == "awaiting-review" and status.get("pull_number"):
                    approved = True
                    await stack.gh.review(
                        stack.people.owner,
                        stack.repo_name,
                        int(status["pull_number"]),
                        as_user=stack.people.maintainer,
                        event="APPROVE",
                    )
            await asyncio.sleep(0.05)
    finally:
        doomed.stop()
        fresh.stop()
    assert doomed.process is not None
    assert doomed.process.returncode == -signal.SIGKILL, "the fault point was never reached"
    return number, run
