"""Who may steer a run (issue 8), over real webhooks against the emulator.

Each test plays a person (or a forged delivery) trying to steer a run and
asserts what GitHub shows afterwards: comments, branches, pull requests.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from app.app_tables import Installation
from app.contracts.ids import repair_workflow_id
from app.demo.project import fix_agent_command, write_project
from app.demo.stack import WEBHOOK_SECRET, LocalStack
from app.engine._store.schema import tasks
from tests.e2e.scenario import (
    final_check,
    github_state,
    open_labelled_issue,
    record_history,
    review,
    status_comment,
    wait_end,
    wait_for,
    wait_phase,
    wait_status_comment,
    workflow_id,
)

SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


@pytest.fixture
def seed(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """The demo repository; ``parametrize("seed", [yaml lines], indirect=True)``
    adds settings to its ``.github/repairbot.yml``."""
    folder = write_project(tmp_path / "project")
    extra = getattr(request, "param", None)
    if extra:
        config = folder / ".github" / "repairbot.yml"
        config.write_text(config.read_text() + extra)
    return folder


async def post_signed(stack: LocalStack, event: str, payload: dict[str, Any]) -> httpx.Response:
    """A delivery signed with the App's webhook secret, as GitHub (or someone who
    captured one) would send it."""
    body = json.dumps(payload).encode()
    signature = hmac.new(WEBHOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
    async with httpx.AsyncClient() as client:
        return await client.post(
            f"{stack.app_url}/webhooks/github",
            content=body,
            headers={
                "X-GitHub-Event": event,
                "X-GitHub-Delivery": str(uuid.uuid4()),
                "X-Hub-Signature-256": f"sha256={signature}",
                "Content-Type": "application/json",
            },
        )


async def _quiet_end(stack: LocalStack, number: int) -> None:
    assert stack.runtime is not None
    try:
        run = await wait_end(stack, number, timeout=90)
    except TimeoutError:
        found = stack.runtime.store.find_run(workflow_id(stack, number))
        assert found is not None
        raise AssertionError(stack.runtime.query(found.run_id, "status")) from None
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "not-triggered", run.result
    await _nothing_on_github(stack, number)


async def _nothing_on_github(stack: LocalStack, number: int) -> None:
    state = await github_state(stack, number)
    assert state["status_comments"] == [] and state["branches"] == ["main"]
    assert state["pulls"] == []


def _triages(stack: LocalStack, name: str) -> list[Any]:
    assert stack.runtime is not None
    return [run for run in stack.runtime.store.list_runs() if run.workflow_name == name]


async def _triages_done(stack: LocalStack, name: str, count: int, timeout: float = 60) -> list[Any]:
    """The ``count`` triage runs named ``name``, once every one has ended."""
    await stack.gh.deliveries.wait()

    def done() -> bool:
        runs = _triages(stack, name)
        return len(runs) == count and all(run.status == "completed" for run in runs)

    await wait_for(f"{count} {name} runs completed", done, timeout=timeout)
    return _triages(stack, name)


@SQLITE_ONLY
async def test_label_from_someone_without_write_access_starts_nothing(
    stack: LocalStack,
) -> None:
    """Triage access may add labels; only write access may start a run."""
    people = stack.people
    await stack.gh.create_user("tina")
    await stack.gh.set_permission(people.owner, stack.repo_name, "tina", "triage")
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack, label_as="tina")
    await _quiet_end(stack, number)


@SQLITE_ONLY
async def test_label_from_a_bot_is_ignored_unless_allow_listed(stack: LocalStack) -> None:
    """The emulator's scripted people are users, so the bot's ``labeled`` delivery
    is built from GitHub's own issue and repository and signed like GitHub's."""
    people = stack.people
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    issue = await stack.gh.create_issue(
        people.owner, stack.repo_name, as_user=people.owner, title="Slugs", body="Broken."
    )
    number = int(issue["number"])
    repository = await stack.gh.rest(
        "GET", f"/repos/{people.owner}/{stack.repo_name}", as_user=people.owner
    )
    payload = {
        "action": "labeled",
        "issue": issue,
        "label": {"id": 1, "name": "repairbot"},
        "repository": repository,
        "sender": {"login": "ci-helper[bot]", "id": 777, "type": "Bot"},
        "installation": {"id": stack.installation_id},
    }
    response = await post_signed(stack, "issues", payload)
    assert response.status_code == 202, response.text
    await _quiet_end(stack, number)


@pytest.mark.slow
@SQLITE_ONLY
@pytest.mark.parametrize("seed", ["trigger_label: fixme\n"], indirect=True)
async def test_the_repository_trigger_label_is_the_one_that_counts(stack: LocalStack) -> None:
    """Another label starts no run at all: the triage reads the config first."""
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    assert stack.runtime is not None
    number = await open_labelled_issue(stack)  # "repairbot": not this repository's trigger
    [triage] = await _triages_done(stack, "label-triage", 1)
    assert triage.result["started"] is False, triage.result
    assert stack.runtime.store.find_run(workflow_id(stack, number)) is None
    await _nothing_on_github(stack, number)
    people = stack.people
    await stack.gh.add_label(
        people.owner, stack.repo_name, number, "fixme", as_user=people.maintainer
    )
    status = await wait_phase(stack, number, "awaiting-review")
    assert status["pull_number"]


@SQLITE_ONLY
async def test_the_trigger_added_together_with_another_label_starts_its_run(
    stack: LocalStack,
) -> None:
    """Bug 3: the label picker adds ``bug`` and ``repairbot`` in one edit (two
    deliveries, ``bug`` first). ``bug`` must not start a run that holds the
    issue while the ``repairbot`` delivery is dropped as "already running"."""
    people = stack.people
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    assert stack.runtime is not None
    issue = await stack.gh.create_issue(
        people.owner, stack.repo_name, as_user=people.owner, title="Slugs", body="Broken."
    )
    number = int(issue["number"])
    await stack.gh.rest(
        "POST",
        f"/repos/{people.owner}/{stack.repo_name}/issues/{number}/labels",
        as_user=people.maintainer,
        body={"labels": ["bug", "repairbot"]},
    )
    triages = await _triages_done(stack, "label-triage", 2)
    by_label = {run.input["request"]["label"]: run.result for run in triages}
    assert by_label["bug"]["started"] is False
    # ``bug`` never asked for a run, whichever delivery was handled first.
    [bug] = [run for run in triages if run.input["request"]["label"] == "bug"]
    asked = [
        event.data.get("activity")
        for event in stack.runtime.store.load_events(bug.run_id)
        if event.type == "activity_scheduled"
    ]
    assert asked == ["triage.trigger_config"], asked
    assert by_label["repairbot"]["started"] is True, by_label
    run = stack.runtime.store.find_run(workflow_id(stack, number))
    assert run is not None and run.input["label"] == "repairbot"
    await wait_phase(stack, number, "awaiting-review")


HOSTILE_REPRO = "```repro\nsh -c 'echo pwned > /tmp/repairbot-pwned; exit 1'\n```\n"


@pytest.mark.slow
@SQLITE_ONLY
async def test_a_repro_block_from_a_reader_is_not_run(stack: LocalStack) -> None:
    people = stack.people
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    issue = await stack.gh.create_issue(
        people.owner,
        stack.repo_name,
        as_user=people.reader,
        title="Slugs keep punctuation",
        body="It breaks.\n\n" + HOSTILE_REPRO,
    )
    number = int(issue["number"])
    await stack.gh.add_label(
        people.owner, stack.repo_name, number, "repairbot", as_user=people.maintainer
    )
    status = await wait_phase(stack, number, "awaiting-review")
    assert status["reproduction_source"] == "config"
    body = await status_comment(stack, number)
    assert f"its author @{people.reader} does not have write access" in body
    assert "configured `reproduce` command" in body


@pytest.mark.slow
@SQLITE_ONLY
async def test_a_repro_block_hidden_in_an_html_comment_never_counts(stack: LocalStack) -> None:
    """Even from a maintainer: what the rendered issue does not show is not read."""
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(
        stack, body="Slugs keep punctuation.\n\n<!--\n" + HOSTILE_REPRO + "-->\n"
    )
    status = await wait_phase(stack, number, "awaiting-review")
    assert status["reproduction_source"] == "config"
    assert "repro block was not used" not in await status_comment(stack, number)


def _fork_pull(pull: dict[str, Any], number: int) -> dict[str, Any]:
    fork = {"id": 999_999, "name": "slugify", "full_name": "mallory/slugify"}
    head = pull["head"] | {"repo": fork, "label": "mallory:" + pull["head"]["ref"]}
    return pull | {"number": number, "head": head}


@pytest.mark.slow
@SQLITE_ONLY
async def test_fork_pull_request_events_do_not_reach_the_run(stack: LocalStack) -> None:
    """A fork's pull request named like repairbot's branch, closed or pushed to,
    and a same-repository pull request with another number: the run goes on."""
    people = stack.people
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    pull_number = status["pull_number"]
    pull = await stack.gh.rest(
        "GET", f"/repos/{people.owner}/{stack.repo_name}/pulls/{pull_number}", as_user=people.owner
    )
    repository = await stack.gh.rest(
        "GET", f"/repos/{people.owner}/{stack.repo_name}", as_user=people.owner
    )
    mallory = {"login": "mallory", "id": 4242, "type": "User"}
    base = {
        "repository": repository,
        "sender": mallory,
        "installation": {"id": stack.installation_id},
    }
    fork = _fork_pull(pull, 99)
    closed = fork | {"state": "closed", "merged": False}
    for payload in (
        base | {"action": "closed", "number": 99, "pull_request": closed},
        base | {"action": "synchronize", "number": 99, "pull_request": fork},
        # Same repository, same branch name, another number: the run checks its number.
        base | {"action": "closed", "number": 98, "pull_request": pull | {"number": 98}},
    ):
        response = await post_signed(stack, "pull_request", payload)
        assert response.status_code == 202, response.text
    await stack.gh.deliveries.wait()
    again = await wait_phase(stack, number, "awaiting-review", timeout=10)
    assert again["pull"]["state"] == "open"

    await review(stack, pull_number, "APPROVE", body="Looks right.")
    run = await wait_end(stack, number)
    assert run.result["outcome"] == "merged", run.result
    [pr] = (await github_state(stack, number))["pulls"]
    assert pr["merged_at"] is not None


@pytest.mark.slow
@SQLITE_ONLY
async def test_a_dismissed_approval_is_revoked(stack: LocalStack) -> None:
    """Recovery test 8: the approval is dismissed after repairbot scheduled the
    merge's checks (both reach it together); it asks for a new review."""
    people = stack.people
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    pull = status["pull_number"]
    await stack.gh.deliveries.hold()
    approval = await review(stack, pull, "APPROVE", body="Looks right.")
    await stack.gh.dismiss_review(
        people.owner, stack.repo_name, pull, approval["id"], as_user=people.owner
    )
    assert await stack.gh.deliveries.release() >= 2
    await wait_status_comment(stack, number, "was dismissed: please review again", timeout=60)
    state = await github_state(stack, number)
    assert state["pulls"][0]["merged_at"] is None and state["pulls"][0]["state"] == "open"

    await review(stack, pull, "APPROVE", body="Now it is right.")
    run = await wait_end(stack, number)
    assert run.result["outcome"] == "merged", run.result
    assert run.result["approval"]["review_id"] != approval["id"]


@pytest.mark.slow
@SQLITE_ONLY
@pytest.mark.parametrize("seed", ["approval_ttl_hours: 1\n"], indirect=True)
async def test_an_expired_approval_does_not_merge(stack: LocalStack) -> None:
    """Recovery test 13: expiry counts from the review's ``submitted_at``."""
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    await stack.gh.advance_clock(-2 * 3600)  # the review is stamped two hours ago
    await review(stack, status["pull_number"], "APPROVE", body="Looks right.")
    await wait_status_comment(stack, number, "expired after 1 hours", timeout=60)
    state = await github_state(stack, number)
    assert state["pulls"][0]["merged_at"] is None
    await stack.gh.advance_clock(2 * 3600)
    await review(stack, status["pull_number"], "APPROVE", body="Fresh approval.")
    run = await wait_end(stack, number)
    assert run.result["outcome"] == "merged", run.result


@pytest.mark.slow
@SQLITE_ONLY
async def test_relabel_while_the_cancel_cleans_up_starts_the_next_run(
    stack: LocalStack,
) -> None:
    """Bug 4: the label is removed (the run cancels) and added back while the
    cancel is still closing the pull request; the relabel waits for that run
    to end and then starts the next one instead of being swallowed."""
    people = stack.people
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    assert stack.runtime is not None
    number = await open_labelled_issue(stack)
    await wait_phase(stack, number, "awaiting-review")
    first = stack.runtime.store.find_run(workflow_id(stack, number))
    assert first is not None
    # Closing the pull request (the cancel's cleanup) hangs for a while.
    await stack.gh.faults.add("PATCH /repos/{owner}/{repo}/pulls/{pull_number}", "delay", delay=4.0)
    await stack.gh.remove_label(
        people.owner, stack.repo_name, number, "repairbot", as_user=people.maintainer
    )

    def cancelling() -> bool:
        assert stack.runtime is not None
        run = stack.runtime.store.load_run(first.run_id)
        return run is not None and run.status == "cancelling"

    await wait_for("the first run is cancelling", cancelling)
    await stack.gh.add_label(
        people.owner, stack.repo_name, number, "repairbot", as_user=people.maintainer
    )
    triages = await _triages_done(stack, "label-triage", 2, timeout=90)
    [relabel] = [run for run in triages if run.result.get("run_id") != first.run_id]
    assert relabel.result["started"] is True, relabel.result
    ended = stack.runtime.store.load_run(first.run_id)
    assert ended is not None and ended.status in ("cancelled", "completed"), ended
    second = stack.runtime.store.find_run(workflow_id(stack, number))
    assert second is not None and second.run_id == relabel.result["run_id"] != first.run_id
    await wait_phase(stack, number, "awaiting-review")


@pytest.mark.slow
@SQLITE_ONLY
async def test_the_merge_closing_the_issue_is_not_a_cancel(stack: LocalStack) -> None:
    """Bug 5: the pull request says ``Fixes #N``, so GitHub closes the issue
    when repairbot merges it; that close is the run's own effect."""
    people = stack.people
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    await review(stack, status["pull_number"], "APPROVE", body="Looks right.")
    run = await wait_end(stack, number)
    assert run.status == "completed" and run.result["outcome"] == "merged", run.result
    issue = await stack.gh.rest(
        "GET", f"/repos/{people.owner}/{stack.repo_name}/issues/{number}", as_user=people.owner
    )
    assert issue["state"] == "closed" and issue["state_reason"] == "completed"


@pytest.mark.slow
@SQLITE_ONLY
async def test_closing_by_someone_without_write_access_does_not_cancel(
    stack: LocalStack,
) -> None:
    """Issue 19 item 7: the issue's author (read access) closes their own
    issue; the maintainer's run goes on and the issue says why."""
    people = stack.people
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    assert stack.runtime is not None
    issue = await stack.gh.create_issue(
        people.owner, stack.repo_name, as_user=people.reader, title="Slugs", body="Broken."
    )
    number = int(issue["number"])
    await stack.gh.add_label(
        people.owner, stack.repo_name, number, "repairbot", as_user=people.maintainer
    )
    await wait_phase(stack, number, "awaiting-review")
    await stack.gh.rest(
        "PATCH",
        f"/repos/{people.owner}/{stack.repo_name}/issues/{number}",
        as_user=people.reader,
        body={"state": "closed"},
    )
    [triage] = await _triages_done(stack, "close-triage", 1)
    assert triage.result["cancelled"] is False, triage.result
    # Closing again (an author may reopen their issue) is one more triage but
    # no second comment.
    for state in ("open", "closed"):
        await stack.gh.rest(
            "PATCH",
            f"/repos/{people.owner}/{stack.repo_name}/issues/{number}",
            as_user=people.reader,
            body={"state": state},
        )
    triages = await _triages_done(stack, "close-triage", 2)
    assert all(t.result["cancelled"] is False for t in triages)
    comments = (await github_state(stack, number))["comments"]
    said = [c for c in comments if "only people with write access" in c["body"]]
    assert len(said) == 1, said
    again = await wait_phase(stack, number, "awaiting-review", timeout=10)
    assert again["pull"]["state"] == "open"
    # A maintainer's close does cancel it.
    await stack.gh.rest(
        "PATCH",
        f"/repos/{people.owner}/{stack.repo_name}/issues/{number}",
        as_user=people.maintainer,
        body={"state": "open"},
    )
    await stack.gh.rest(
        "PATCH",
        f"/repos/{people.owner}/{stack.repo_name}/issues/{number}",
        as_user=people.maintainer,
        body={"state": "closed"},
    )
    run = await wait_end(stack, number)
    assert run.result["outcome"] == "cancelled", run.result


@pytest.mark.slow
@SQLITE_ONLY
async def test_a_renamed_repository_keeps_its_run(stack: LocalStack) -> None:
    """Bug 6: after a rename GitHub sends the new ``full_name`` with the same
    repository id. The label sent again starts no second run, the review of
    the run's pull request reaches it, and its later GitHub calls use the new
    name (told by the ``repository.renamed`` delivery)."""
    people = stack.people
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    assert stack.runtime is not None
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    first = stack.runtime.store.find_run(workflow_id(stack, number))
    assert first is not None
    await stack.gh.rename_repo(people.owner, stack.repo_name, "slugify-ng", as_user=people.owner)
    stack.repo_name = "slugify-ng"
    await stack.gh.comment(
        people.owner, stack.repo_name, number, "/repair", as_user=people.maintainer
    )
    [command] = await _triages_done(stack, "slash-command", 1)
    assert command.result["obeyed"] is True
    replies = [c["body"] for c in (await github_state(stack, number))["comments"]]
    assert any(f"already active for this issue: `{first.run_id}`" in r for r in replies), replies
    await review(stack, status["pull_number"], "APPROVE", body="Looks right.")
    run = await wait_end(stack, number)
    assert run.run_id == first.run_id
    assert run.result["outcome"] == "merged", run.result
    assert len([r for r in stack.runtime.store.list_runs() if r.workflow_name == "repair"]) == 1
    with stack.runtime.store.engine.connect() as conn:
        merges = conn.execute(
            select(tasks.c.input).where(
                tasks.c.run_id == run.run_id, tasks.c.activity == "github.merge"
            )
        ).scalars()
        assert [m["repo"] for m in merges] == [f"{people.owner}/slugify-ng"]
    record_history(stack, number, "repair_v2_repository_renamed")


@pytest.mark.slow
@SQLITE_ONLY
async def test_a_transferred_issue_keeps_its_run_and_a_deleted_one_ends_it(
    stack: LocalStack,
) -> None:
    """``issues.transferred``: the run is re-keyed to the issue's new place,
    so events about the new issue reach it; ``issues.deleted`` there cancels
    it, and it closes its pull request and deletes its branch, and reports the
    end on its check run: nothing is left, and nothing is written to the
    issue that is gone."""
    people = stack.people
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    assert stack.runtime is not None
    number = await open_labelled_issue(stack)
    await wait_phase(stack, number, "awaiting-review")
    first = stack.runtime.store.find_run(workflow_id(stack, number))
    assert first is not None
    await stack.gh.create_repo_from_folder(people.owner, "elsewhere", None)
    await stack.gh.set_permission(people.owner, "elsewhere", people.maintainer, "write")
    moved = await stack.gh.transfer_issue(
        people.owner, stack.repo_name, number, f"{people.owner}/elsewhere", as_user=people.owner
    )
    await stack.gh.deliveries.wait()
    new_key = repair_workflow_id(stack.gh.repo_id(f"{people.owner}/elsewhere"), moved["number"])
    found = stack.runtime.store.find_run(new_key)
    assert found is not None and found.run_id == first.run_id

    comments_before = _comment_calls(stack, first.run_id)
    await stack.gh.delete_issue(people.owner, "elsewhere", moved["number"], as_user=people.owner)
    ended = await stack.runtime.wait_for(first.run_id, timeout=60)
    assert ended.status == "cancelled", ended
    assert ended.result["outcome"] == "cancelled" and not ended.result.get("leftovers")
    assert "the issue was deleted" in ended.result["detail"]
    # The end is on the proposed commit's check run; no comment was tried.
    check = await final_check(stack, ended.result["proposed_sha"])
    assert check["conclusion"] == "cancelled", check
    assert _comment_calls(stack, first.run_id) == comments_before
    pulls = await stack.gh.rest(
        "GET", f"/repos/{people.owner}/{stack.repo_name}/pulls?state=all", as_user=people.owner
    )
    branches = await stack.gh.rest(
        "GET", f"/repos/{people.owner}/{stack.repo_name}/branches", as_user=people.owner
    )
    assert [p["state"] for p in pulls] == ["closed"]
    assert [b["name"] for b in branches] == ["main"]


def _comment_calls(stack: LocalStack, run_id: str) -> int:
    """How many comments the run has asked for (its recorded history)."""
    assert stack.runtime is not None
    return sum(
        1
        for event in stack.runtime.store.load_events(run_id)
        if event.type == "activity_scheduled" and event.data.get("activity") == "github.comment"
    )


@pytest.mark.slow
@SQLITE_ONLY
async def test_uninstalling_the_app_ends_its_runs_at_once(stack: LocalStack) -> None:
    """``installation.deleted``: the app lost access, so nothing on GitHub can
    be cleaned; the run ends now and its record says so."""
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    assert stack.runtime is not None
    number = await open_labelled_issue(stack)
    await wait_phase(stack, number, "awaiting-review")
    await stack.gh.delete_installation(stack.installation_id)
    run = await wait_end(stack, number)
    assert run.status == "terminated", run
    assert "uninstalled" in run.error["reason"]
    assert "nothing is left on GitHub to clean up" in run.error["reason"]


@pytest.mark.slow
@SQLITE_ONLY
async def test_a_suspended_installation_pauses_and_unsuspend_goes_on(stack: LocalStack) -> None:
    """While suspended, GitHub refuses the app's calls (403) and sends it no
    events; after ``unsuspend`` the waiting run takes its approval and merges."""
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    assert stack.runtime is not None
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    waiting = stack.runtime.store.find_run(workflow_id(stack, number))
    assert waiting is not None
    # Suspended while the run waits (its status comment and check written).
    await wait_for("the waiting run calls nothing", lambda: _idle(stack, waiting.run_id))
    await stack.gh.suspend_installation(stack.installation_id)
    await stack.gh.deliveries.wait()
    assert _installation_status(stack) == "suspended"
    await stack.gh.suspend_installation(stack.installation_id, suspended=False)
    await stack.gh.deliveries.wait()
    assert _installation_status(stack) == "active"
    await review(stack, status["pull_number"], "APPROVE", body="Looks right.")
    run = await wait_end(stack, number)
    assert run.result["outcome"] == "merged", run.result


@pytest.mark.slow
@SQLITE_ONLY
async def test_a_run_mid_call_when_suspended_parks_and_goes_on_after_unsuspend(
    stack: LocalStack,
) -> None:
    """Issue 20: the suspension comes while the run is creating its pull
    request (GitHub holds the request; it then answers 403 "This installation
    has been suspended"). The call stops at once, no retries, and the run
    parks holding nothing; ``installation.unsuspend`` makes it call again
    (one pull request, found by its marker if it had landed) and go on to the
    merge."""
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    assert stack.runtime is not None
    await stack.gh.faults.add("POST /repos/{owner}/{repo}/pulls", "delay", delay=3, times=1)
    number = await open_labelled_issue(stack)

    async def held() -> bool:
        return all(fault["fired"] == 1 for fault in await stack.gh.faults.list())

    await wait_for("the pull request creation reached GitHub", held, timeout=120)
    await stack.gh.suspend_installation(stack.installation_id)
    run = stack.runtime.store.find_run(workflow_id(stack, number))
    assert run is not None
    await wait_for(
        "the run parked on the suspension",
        lambda: _suspended_calls(stack, run.run_id) == 1 and _idle(stack, run.run_id),
        timeout=60,
    )
    parked = stack.runtime.store.load_run(run.run_id)
    assert parked is not None and parked.status == "running", parked
    owner, repo = stack.people.owner, stack.repo_name
    pulls = await stack.gh.rest("GET", f"/repos/{owner}/{repo}/pulls", as_user=owner)
    assert pulls == []
    await stack.gh.suspend_installation(stack.installation_id, suspended=False)
    status = await wait_phase(stack, number, "awaiting-review", timeout=60)
    await review(stack, status["pull_number"], "APPROVE", body="Looks right.")
    ended = await wait_end(stack, number)
    assert ended.result["outcome"] == "merged", ended.result
    assert _suspended_calls(stack, run.run_id) == 1  # one stop, no retries burned
    pulls = await stack.gh.rest("GET", f"/repos/{owner}/{repo}/pulls?state=all", as_user=owner)
    assert len(pulls) == 1
    record_history(stack, number, "repair_v2_suspended_mid_call")


def _suspended_calls(stack: LocalStack, run_id: str) -> int:
    """Activity failures of the run that were the installation's suspension."""
    assert stack.runtime is not None
    return sum(
        1
        for event in stack.runtime.store.load_events(run_id)
        if event.type == "activity_failed"
        and event.data.get("error_type") == "InstallationSuspended"
    )


def _idle(stack: LocalStack, run_id: str) -> bool:
    """No activity of the run is scheduled or running (recorded state)."""
    assert stack.runtime is not None
    with stack.runtime.store.engine.connect() as conn:
        busy = conn.execute(
            select(tasks.c.id).where(
                tasks.c.run_id == run_id, tasks.c.status.in_(("scheduled", "running"))
            )
        ).first()
    return busy is None


def _installation_status(stack: LocalStack) -> str:
    assert stack.runtime is not None
    table = Installation.__table__  # type: ignore[attr-defined]
    with stack.runtime.store.engine.connect() as conn:
        # The stack repository's installation (the proposal organization has its own).
        query = select(table.c.status).where(table.c.id == stack.installation_id)
        [status] = conn.execute(query).scalars().all()
    return str(status)
