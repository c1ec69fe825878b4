"""The proposal fork (app/github/forks.py) and pull requests from it, against
the emulator: made on first use and waited for, found again by name and
parent, never somebody else's repository, one fork however often asked."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from gh_scene import Recording, Scene
from sqlalchemy import Engine

from activities.github import GitHubAccess, GitHubActivities
from app.config import Settings
from app.contracts.github import CommitInput, PushInput
from app.engine._errors import TransientError
from app.evidence.database import DatabaseEvidenceStore
from app.github import gitcmd
from app.github.forks import (
    ACCOUNT_REUSE,
    Account,
    ForkRefused,
    ProposalAccounts,
    ensure_fork,
    proposal_account,
)
from app.github.markers import OpId
from app.github.pulls import ensure_pull_request, find_pull_requests
from app.github.repos import RepoRef
from emulator.gitview import open_git
from emulator.state import DEFAULT_APP_PERMISSIONS
from tests.activities.support import Dependencies, RecordingContext, body

ORG = "acme-bot"
FORKING = {**DEFAULT_APP_PERMISSIONS, "administration": "write"}
OP = OpId("run-1", "pull-request")


async def _org(scene: Scene, permissions: dict[str, str] = FORKING) -> Account:
    await scene.client.create_user(ORG, type="Organization")
    await scene.client.create_installation(scene.app.id, ORG, permissions=permissions)
    return await proposal_account(scene.factory, ORG)


class Pauses:
    """Records the waits ensure_fork asks for instead of sleeping."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


async def always(_: RepoRef) -> bool:
    return True


def forks(scene: Scene) -> list[str]:
    return sorted(r.full_name for r in scene.emulator.store.repos.values() if r.fork)


async def test_the_account_is_found_through_the_apps_installation(scene: Scene) -> None:
    account = await _org(scene)
    assert account.login == ORG and account.organization
    with pytest.raises(ForkRefused, match="not installed on nobody"):
        await proposal_account(scene.factory, "nobody")


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def _refuse_lookups(scene: Scene) -> None:
    await scene.client.faults.add("GET /orgs/{org}/installation", "fail", status=500, times=99)


async def test_a_worker_reads_the_account_once_a_minute(scene: Scene) -> None:
    await _org(scene)
    clock = Clock()
    accounts = ProposalAccounts(scene.factory, clock=clock)
    first = await accounts.get(ORG)
    await _refuse_lookups(scene)
    assert await accounts.get(ORG) == first  # kept: GitHub was not asked again
    clock.now += ACCOUNT_REUSE
    with pytest.raises(TransientError):
        await accounts.get(ORG)


async def test_a_failure_while_using_the_account_reads_it_again(scene: Scene) -> None:
    await _org(scene)
    accounts = ProposalAccounts(scene.factory, clock=Clock())
    with pytest.raises(PermissionError):
        async with accounts.using(ORG):
            raise PermissionError("the token mint was refused")
    await _refuse_lookups(scene)
    with pytest.raises(TransientError):
        await accounts.get(ORG)


async def test_first_use_makes_the_fork_and_waits_for_it(scene: Scene) -> None:
    account = await _org(scene)
    await scene.client.fork_pending(3)
    pauses = Pauses()
    fork = await ensure_fork(
        scene.factory, scene.gh, scene.repo, account, ready=always, pause=pauses
    )
    assert fork == RepoRef(ORG, "demo")
    assert forks(scene) == [f"{ORG}/demo"]
    assert pauses.waits  # it was not there at first: asked again after a pause
    made = scene.emulator.store.repo(ORG, "demo")
    assert made is not None and made.parent is scene.state()


async def test_an_existing_fork_is_used_without_asking_again(scene: Scene) -> None:
    account = await _org(scene)
    await scene.client.fork_pending(0)
    await ensure_fork(scene.factory, scene.gh, scene.repo, account, ready=always)
    await scene.client.faults.add("POST /repos/{owner}/{repo}/forks", "fail", status=500)
    again = await ensure_fork(scene.factory, scene.gh, scene.repo, account, ready=always)
    assert again == RepoRef(ORG, "demo") and forks(scene) == [f"{ORG}/demo"]


async def test_a_namesake_that_is_not_our_fork_is_never_used(
    scene: Scene, seed_folder: Path
) -> None:
    account = await _org(scene)
    await scene.client.fork_pending(0)
    await scene.client.create_repo_from_folder(ORG, "demo", seed_folder)  # not a fork
    fork = await ensure_fork(scene.factory, scene.gh, scene.repo, account, ready=always)
    assert fork == RepoRef(ORG, "demo-1")
    # Found again (GitHub answers the existing fork), still one fork.
    assert await ensure_fork(scene.factory, scene.gh, scene.repo, account, ready=always) == fork
    assert forks(scene) == [f"{ORG}/demo-1"]


async def test_a_lost_answer_to_the_fork_request_is_safe(scene: Scene) -> None:
    account = await _org(scene)
    await scene.client.fork_pending(0)
    await scene.client.faults.add("POST /repos/{owner}/{repo}/forks", "drop")
    fork = await ensure_fork(scene.factory, scene.gh, scene.repo, account, ready=always)
    assert fork == RepoRef(ORG, "demo") and forks(scene) == [f"{ORG}/demo"]


async def test_a_fork_git_cannot_read_yet_is_waited_for(scene: Scene) -> None:
    account = await _org(scene)
    await scene.client.fork_pending(0)
    answers = iter([False, False, True])

    async def ready(_: RepoRef) -> bool:
        return next(answers)

    pauses = Pauses()
    await ensure_fork(scene.factory, scene.gh, scene.repo, account, ready=ready, pause=pauses)
    assert len(pauses.waits) == 2


async def test_a_fork_that_never_arrives_is_retried_later(scene: Scene) -> None:
    account = await _org(scene)
    await scene.client.fork_pending(100)
    with pytest.raises(TransientError, match="not ready yet"):
        await ensure_fork(
            scene.factory, scene.gh, scene.repo, account, ready=always, polls=2, pause=Pauses()
        )


async def test_no_permission_to_fork_says_what_to_do(scene: Scene) -> None:
    account = await _org(scene, permissions=DEFAULT_APP_PERMISSIONS)
    with pytest.raises(ForkRefused, match="Administration"):
        await ensure_fork(scene.factory, scene.gh, scene.repo, account, ready=always)
    assert forks(scene) == []


async def test_pull_request_from_the_fork_is_found_again_by_owner_and_marker(
    scene: Scene,
) -> None:
    account = await _org(scene)
    await scene.client.fork_pending(0)
    fork = await ensure_fork(scene.factory, scene.gh, scene.repo, account, ready=always)
    await scene.client.set_permission(fork.owner, fork.name, "alice", "write")
    await scene.client.push_as("alice", fork.owner, fork.name, "repairbot/issue-1", {"a": "1"})
    login = scene.bot_login
    first = await ensure_pull_request(
        scene.gh, scene.repo, head="repairbot/issue-1", base="main", title="Fix",
        body="evidence", op=OP, bot_login=login, head_owner=ORG,
    )  # fmt: skip
    assert first.created and first.draft
    again = await ensure_pull_request(
        scene.gh, scene.repo, head="repairbot/issue-1", base="main", title="Fix",
        body="evidence", op=OP, bot_login=login, head_owner=ORG,
    )  # fmt: skip
    assert again.number == first.number and not again.created
    # The same branch name in the base repository is another pull request's head.
    assert await find_pull_requests(scene.gh, scene.repo, "repairbot/issue-1", OP) == []
    found = await find_pull_requests(scene.gh, scene.repo, "repairbot/issue-1", OP, head_owner=ORG)
    assert [p.number for p in found] == [first.number]
    assert len(scene.state().pulls()) == 1


NEW_FILE = (
    "diff --git a/fix.txt b/fix.txt\nnew file mode 100644\n"
    "--- /dev/null\n+++ b/fix.txt\n@@ -0,0 +1 @@\n+fixed\n"
)


async def test_a_push_to_the_fork_carries_the_bases_newer_history_in_one_fetch(
    scene: Scene, served: str, db_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fork lacks what the base gained since it was made: the push sends
    it, fetched whole with the base commit (one fetch, not a shallow one
    deepened after)."""
    account = await _org(scene)
    await scene.client.fork_pending(0)
    fork = await ensure_fork(scene.factory, scene.gh, scene.repo, account, ready=always)
    for n in (1, 2):
        moved = await scene.client.push_as("alice", "octo", "demo", "main", {f"{n}.txt": "new\n"})
    evidence = DatabaseEvidenceStore(db_engine)
    patch = evidence.put(NEW_FILE.encode(), kind="patch", name="fix.diff")
    activities = GitHubActivities(GitHubAccess(scene.factory, served), evidence, Settings())
    commit = CommitInput(
        repo="octo/demo",
        installation_id=scene.installation_id,
        base_sha=moved["sha"],
        patch_sha=patch.sha256,
        message="Fix #1",
        timestamp="2026-12-01T00:00:00+00:00",
    )
    actx = RecordingContext(Dependencies())
    built = await body(activities, "github.build_commit").fn(actx, commit.model_dump(mode="json"))
    fetches: list[list[str]] = []
    run_git = gitcmd.run_git

    async def counting(args: list[str], **kwargs: Any) -> gitcmd.GitResult:
        if args[0] == "fetch":
            fetches.append(args)
        return await run_git(args, **kwargs)

    monkeypatch.setattr(gitcmd, "run_git", counting)
    push = PushInput(
        **commit.model_dump(),
        branch="repairbot/issue-1",
        sha=built["sha"],
        head_repo=fork.full_name,
    )
    pushed = await body(activities, "github.push_branch").fn(actx, push.model_dump(mode="json"))
    assert pushed["status"] == "pushed", pushed
    at = scene.emulator.store.repo(ORG, "demo")
    assert at is not None and open_git(at).resolve("refs/heads/repairbot/issue-1") == built["sha"]
    assert len(fetches) == 1 and "--depth=1" not in fetches[0]


async def test_a_fork_is_checked_against_the_parent_id_the_run_knows(scene: Scene) -> None:
    """The base repository's id given (the run's, from the signed event): the
    base is not read to learn it, and the fork found is checked against it."""
    account = await _org(scene)
    await scene.client.fork_pending(0)
    await ensure_fork(scene.factory, scene.gh, scene.repo, account, ready=always)
    recording = Recording(httpx.ASGITransport(app=scene.emulator.asgi()))
    factory = scene.new_factory(transport=recording)
    fork = await ensure_fork(
        factory,
        factory.for_installation(scene.installation_id),
        scene.repo,
        account,
        ready=always,
        parent_id=scene.state().id,
    )
    assert fork == RepoRef(ORG, "demo")
    reads = [line for line in recording.seen if line.startswith("GET /api/v3/repos/")]
    assert reads == [f"GET /api/v3/repos/{ORG}/demo"]


async def test_a_fork_of_another_parent_id_is_never_used(scene: Scene) -> None:
    """An id that is not the fork's parent (the name now another repository's):
    the existing fork is not taken, and GitHub's answer to a fork request,
    naming that other parent, is refused."""
    account = await _org(scene)
    await scene.client.fork_pending(0)
    await ensure_fork(scene.factory, scene.gh, scene.repo, account, ready=always)
    with pytest.raises(ForkRefused, match="not a fork of"):
        await ensure_fork(
            scene.factory,
            scene.gh,
            scene.repo,
            account,
            ready=always,
            parent_id=scene.state().id + 1000,
        )
