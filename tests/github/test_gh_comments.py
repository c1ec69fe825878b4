from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from gh_scene import Recording, Scene
from sqlalchemy import Engine

from activities.github import GitHubAccess, GitHubActivities
from app.config import Settings
from app.contracts.github import CommentInput
from app.engine._errors import AmbiguousError, PermanentError, TransientError
from app.engine._registry import ActivityDefn
from app.evidence.database import DatabaseEvidenceStore
from app.github.client import InstallationGitHub
from app.github.comments import CommentResult, ensure_comment, rewrite_comment
from app.github.markers import Marker, OpId, parse_marker
from tests.activities.support import Dependencies, RecordingContext, body

OP = OpId("run-1", "status")
CREATE = "POST /repos/{owner}/{repo}/issues/{issue_number}/comments"


async def ensure(
    scene: Scene, issue: int, body: str, *, gh: InstallationGitHub | None = None, **kw: Any
) -> CommentResult:
    return await ensure_comment(
        gh or scene.gh, scene.repo, issue, OP, body, bot_login=scene.bot_login, **kw
    )


@pytest.fixture
async def issue(scene: Scene) -> int:
    created = await scene.client.create_issue("octo", "demo", as_user="alice", title="add is wrong")
    return int(created["number"])


def comments_on(scene: Scene, number: int) -> list[tuple[int, str, str]]:
    """(id, author, body) of every comment on the issue, as the emulator holds them."""
    return sorted(
        (c.id, c.user.login, c.body)
        for c in scene.state().comments.values()
        if c.issue_number == number
    )


async def test_created_once_then_updated_in_place(scene: Scene, issue: int) -> None:
    first = await ensure(scene, issue, "Running", fields={"sha": "abc"})
    second = await ensure(scene, issue, "Done")
    same = await ensure(scene, issue, "Done")
    assert (first.created, second.created, second.updated, same.updated) == (
        True,
        False,
        True,
        False,
    )
    [(comment_id, author, body)] = comments_on(scene, issue)
    assert comment_id == first.id == second.id == same.id
    assert author == "repairbot[bot]"
    assert body.startswith("Done") and parse_marker(body) == Marker(OP)


async def test_lost_answer_is_read_back_not_repeated(scene: Scene, issue: int) -> None:
    await scene.client.faults.add(CREATE, "drop")
    result = await ensure(scene, issue, "Running")
    assert result.created
    assert [c[0] for c in comments_on(scene, issue)] == [result.id]


async def test_server_error_is_transient_and_the_retry_creates_one(
    scene: Scene, issue: int
) -> None:
    await scene.client.faults.add(CREATE, "fail", status=502)
    with pytest.raises(TransientError):
        await ensure(scene, issue, "Running")
    assert comments_on(scene, issue) == []
    await ensure(scene, issue, "Running")
    assert len(comments_on(scene, issue)) == 1


@pytest.mark.parametrize(
    ("status", "style"), [(403, "retry-after"), (429, "retry-after"), (403, "x-ratelimit")]
)
async def test_rate_limit_asks_for_the_delay_github_gave(
    scene: Scene, issue: int, status: int, style: str
) -> None:
    await scene.client.faults.add(
        CREATE, "rate_limit", status=status, rate_limit_style=style, retry_after=42
    )
    with pytest.raises(TransientError) as caught:
        await ensure(scene, issue, "Running")
    assert caught.value.next_retry_delay == pytest.approx(42, abs=2)
    assert comments_on(scene, issue) == []


async def test_racing_twins_leave_exactly_one_comment(scene: Scene, issue: int) -> None:
    results = await asyncio.gather(*(ensure(scene, issue, "Running") for _ in range(3)))
    [(comment_id, _, _)] = comments_on(scene, issue)
    assert {r.id for r in results} == {comment_id}


async def test_a_pasted_marker_in_a_users_comment_is_not_ours(scene: Scene, issue: int) -> None:
    forged = "look: " + Marker(OP).render()
    await scene.client.comment("octo", "demo", issue, forged, as_user="alice")
    result = await ensure(scene, issue, "Running")
    assert result.created
    authors = [(author, body) for _, author, body in comments_on(scene, issue)]
    assert authors[0] == ("alice", forged)  # untouched
    assert authors[1][0] == "repairbot[bot]"


async def test_the_marker_is_found_beyond_the_first_page(scene: Scene, issue: int) -> None:
    first = await ensure(scene, issue, "Running")
    await asyncio.gather(
        *(scene.client.comment("octo", "demo", issue, f"+{i}", as_user="alice") for i in range(100))
    )
    # Move ours to the second page: delete it and recreate it after the others.
    await scene.gh.rest.issues.async_delete_comment("octo", "demo", first.id)
    later = await ensure(scene, issue, "Running")
    assert later.created
    again = await ensure(scene, issue, "Done")
    assert (again.id, again.created) == (later.id, False)
    assert len(comments_on(scene, issue)) == 101


async def test_other_failures_are_permanent(scene: Scene) -> None:
    with pytest.raises(PermanentError, match="404"):
        await ensure(scene, 999, "Running")


async def test_timeout_with_nothing_to_read_back_is_ambiguous(
    scene: Scene, issue: int, served: str
) -> None:
    # Over real HTTP (in-process transports have no timeouts): the emulator holds
    # the request longer than we wait, so our read-back finds nothing: ambiguous,
    # since the request may still land.
    impatient = scene.new_factory(served, timeout=httpx.Timeout(0.1))
    gh = impatient.for_installation(scene.installation_id)
    await gh.rest.repos.async_get("octo", "demo")  # mint the token before the fault
    await scene.client.faults.add(CREATE, "delay", delay=0.3)
    with pytest.raises(AmbiguousError):
        await ensure(scene, issue, "Running", gh=gh)
    # The runtime's reconcile is the same call: one comment, whatever the held request did.
    result = await ensure(scene, issue, "Running")
    assert [c[0] for c in comments_on(scene, issue)] == [result.id]


async def test_a_known_comment_is_rewritten_in_one_request(scene: Scene, issue: int) -> None:
    """An id an earlier call returned: one edit, no listing of the issue's comments."""
    first = await ensure(scene, issue, "Running")
    recording = Recording(httpx.ASGITransport(app=scene.emulator.asgi()))
    gh = scene.new_factory(transport=recording).for_installation(scene.installation_id)
    await gh.rest.repos.async_get("octo", "demo")  # the token minted before counting
    recording.seen.clear()
    result = await rewrite_comment(
        gh, scene.repo, first.id, issue, OP, "Done", bot_login=scene.bot_login
    )
    assert [line.split()[0] for line in recording.seen] == ["PATCH"]
    assert (result.id, result.created, result.updated) == (first.id, False, True)
    [(comment_id, _, body)] = comments_on(scene, issue)
    assert comment_id == first.id
    assert body.startswith("Done") and parse_marker(body) == Marker(OP)


async def test_a_known_comment_deleted_since_is_made_again(scene: Scene, issue: int) -> None:
    first = await ensure(scene, issue, "Running")
    await scene.client.rest(
        "DELETE", f"/repos/octo/demo/issues/comments/{first.id}", as_user="alice"
    )
    result = await rewrite_comment(
        scene.gh, scene.repo, first.id, issue, OP, "Done", bot_login=scene.bot_login
    )
    assert result.created and result.id != first.id
    [(comment_id, _, body)] = comments_on(scene, issue)
    assert comment_id == result.id and body.startswith("Done")


async def test_a_write_known_to_be_the_first_creates_without_listing(
    scene: Scene, issue: int
) -> None:
    """Nothing can carry the marker yet: the create, then the listing that
    finds a racing twin's; no listing before it."""
    recording = Recording(httpx.ASGITransport(app=scene.emulator.asgi()))
    gh = scene.new_factory(transport=recording).for_installation(scene.installation_id)
    await gh.rest.repos.async_get("octo", "demo")  # the token minted before counting
    recording.seen.clear()
    result = await ensure(scene, issue, "Running", gh=gh, unwritten=True)
    assert [line.split()[0] for line in recording.seen] == ["POST", "GET"]
    assert result.created
    assert [c[0] for c in comments_on(scene, issue)] == [result.id]


async def test_racing_first_writes_converge_on_one_comment(scene: Scene, issue: int) -> None:
    results = await asyncio.gather(
        *(ensure(scene, issue, "Running", unwritten=True) for _ in range(2))
    )
    [(kept, _, _)] = comments_on(scene, issue)
    assert {r.id for r in results} == {kept}


def comment_activity(scene: Scene, recording: Recording, db_engine: Engine) -> ActivityDefn:
    """The ``github.comment`` activity of a worker whose requests ``recording`` keeps."""
    factory = scene.new_factory(transport=recording)
    access = GitHubAccess(factory, "http://git.invalid")
    activities = GitHubActivities(access, DatabaseEvidenceStore(db_engine), Settings())
    return body(activities, "github.comment")


def first_status_write(scene: Scene, issue: int) -> dict[str, Any]:
    return CommentInput(
        repo="octo/demo",
        installation_id=scene.installation_id,
        issue_number=issue,
        op_run=OP.run,
        op_step=OP.step,
        body="Running",
        first_write=True,
    ).model_dump(mode="json")


async def test_a_later_attempt_of_a_first_write_finds_the_earlier_attempts_comment(
    scene: Scene, issue: int, db_engine: Engine
) -> None:
    """The first attempt created the comment and died before its result was
    recorded: the next attempt lists the issue's comments first and creates
    nothing."""
    recording = Recording(httpx.ASGITransport(app=scene.emulator.asgi()))
    write = comment_activity(scene, recording, db_engine)
    first = await write.fn(
        RecordingContext(Dependencies(), attempt=1), first_status_write(scene, issue)
    )
    recording.seen.clear()
    again = await write.fn(
        RecordingContext(Dependencies(), attempt=2), first_status_write(scene, issue)
    )
    assert not [line for line in recording.seen if line.startswith("POST")]
    assert again["id"] == first["id"]
    assert [c[0] for c in comments_on(scene, issue)] == [first["id"]]
