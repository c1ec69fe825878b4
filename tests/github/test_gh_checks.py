from __future__ import annotations

import asyncio

import httpx
import pytest
from gh_scene import Recording, Scene
from sqlalchemy import Engine

from activities.github import GitHubAccess, GitHubActivities
from app.config import Settings
from app.contracts.github import CheckRunInput
from app.engine._errors import AmbiguousError, PermanentError, TransientError
from app.evidence.database import DatabaseEvidenceStore
from app.github.checks import CheckRunView, ensure_check_run, update_check_run
from app.github.markers import OpId
from tests.activities.support import Dependencies, RecordingContext, body

OP = OpId("run-1", "check")
CREATE = "POST /repos/{owner}/{repo}/check-runs"
UPDATE = "PATCH /repos/{owner}/{repo}/check-runs/{check_run_id}"
RUNNING = CheckRunView("repairbot", "Reproducing", "Running the reproduction")
PASSED = CheckRunView("repairbot", "Fix verified", "All tests pass", conclusion="success")


def runs_in(scene: Scene) -> list[tuple[int, str | None, str, str | None, str | None]]:
    """(id, external id, status, conclusion, title) of every check run the emulator holds."""
    return sorted(
        (r.id, r.external_id, r.status, r.conclusion, r.output.get("title"))
        for r in scene.state().check_runs.values()
    )


async def test_created_in_progress_then_completed_in_place(scene: Scene) -> None:
    first = await ensure_check_run(
        scene.gh, scene.repo, scene.head, OP, RUNNING, app_id=scene.app.id
    )
    done = await ensure_check_run(scene.gh, scene.repo, scene.head, OP, PASSED, app_id=scene.app.id)
    assert first.created and not done.created and first.id == done.id
    assert runs_in(scene) == [(first.id, OP.token, "completed", "success", "Fix verified")]


async def test_created_completed_directly(scene: Scene) -> None:
    result = await ensure_check_run(scene.gh, scene.repo, scene.head, OP, PASSED)
    assert runs_in(scene) == [(result.id, OP.token, "completed", "success", "Fix verified")]


async def test_lost_answer_is_read_back(scene: Scene) -> None:
    await scene.client.faults.add(CREATE, "drop")
    result = await ensure_check_run(scene.gh, scene.repo, scene.head, OP, RUNNING)
    assert [run[0] for run in runs_in(scene)] == [result.id]


async def test_racing_twins_converge_on_the_oldest_run(scene: Scene) -> None:
    results = await asyncio.gather(
        *(ensure_check_run(scene.gh, scene.repo, scene.head, OP, RUNNING) for _ in range(2))
    )
    runs = runs_in(scene)
    counting = [run for run in runs if run[3] != "skipped"]
    assert len(counting) == 1 and {r.id for r in results} == {counting[0][0]}
    assert counting[0][0] == runs[0][0]  # the oldest one counts; any twin is marked skipped


async def test_other_operations_do_not_match(scene: Scene) -> None:
    await ensure_check_run(scene.gh, scene.repo, scene.head, OpId("run-2", "check"), RUNNING)
    await ensure_check_run(scene.gh, scene.repo, scene.head, OP, RUNNING)
    assert len(runs_in(scene)) == 2


async def test_failures_are_classified(scene: Scene) -> None:
    await scene.client.faults.add(CREATE, "fail", status=503)
    with pytest.raises(TransientError):
        await ensure_check_run(scene.gh, scene.repo, scene.head, OP, RUNNING)
    with pytest.raises(PermanentError):
        await ensure_check_run(scene.gh, scene.repo, "f" * 40, OP, RUNNING)
    assert runs_in(scene) == []


async def test_a_known_check_run_is_updated_in_one_request(scene: Scene) -> None:
    """An id an earlier call returned: one update, no listing of the commit's check runs."""
    first = await ensure_check_run(scene.gh, scene.repo, scene.head, OP, RUNNING)
    recording = Recording(httpx.ASGITransport(app=scene.emulator.asgi()))
    gh = scene.new_factory(transport=recording).for_installation(scene.installation_id)
    await gh.rest.repos.async_get("octo", "demo")  # the token minted before counting
    recording.seen.clear()
    done = await update_check_run(gh, scene.repo, first.id, scene.head, OP, PASSED)
    assert [line.split()[0] for line in recording.seen] == ["PATCH"]
    assert (done.id, done.created) == (first.id, False)
    assert runs_in(scene) == [(first.id, OP.token, "completed", "success", "Fix verified")]


async def test_an_update_by_id_sent_again_leaves_one_check_run(scene: Scene) -> None:
    """A crash after the update reached GitHub and before its result was
    recorded: the next attempt sends the same update, and nothing doubles."""
    first = await ensure_check_run(scene.gh, scene.repo, scene.head, OP, RUNNING)
    for _ in range(2):
        await update_check_run(scene.gh, scene.repo, first.id, scene.head, OP, PASSED)
    assert runs_in(scene) == [(first.id, OP.token, "completed", "success", "Fix verified")]


async def test_a_lost_answer_to_an_update_by_id_is_sent_again(scene: Scene) -> None:
    first = await ensure_check_run(scene.gh, scene.repo, scene.head, OP, RUNNING)
    await scene.client.faults.add(UPDATE, "drop")
    with pytest.raises(AmbiguousError):
        await update_check_run(scene.gh, scene.repo, first.id, scene.head, OP, PASSED)
    await update_check_run(scene.gh, scene.repo, first.id, scene.head, OP, PASSED)
    assert runs_in(scene) == [(first.id, OP.token, "completed", "success", "Fix verified")]


async def test_an_id_github_does_not_know_is_found_by_its_marker(scene: Scene) -> None:
    first = await ensure_check_run(scene.gh, scene.repo, scene.head, OP, RUNNING)
    done = await update_check_run(scene.gh, scene.repo, 987654321, scene.head, OP, PASSED)
    assert done.id == first.id
    assert runs_in(scene) == [(first.id, OP.token, "completed", "success", "Fix verified")]


async def test_a_write_known_to_be_the_first_creates_without_listing(scene: Scene) -> None:
    """Nothing can carry the marker on this commit yet: the create, then the
    listing that finds a racing twin's; no listing before it."""
    recording = Recording(httpx.ASGITransport(app=scene.emulator.asgi()))
    gh = scene.new_factory(transport=recording).for_installation(scene.installation_id)
    await gh.rest.repos.async_get("octo", "demo")  # the token minted before counting
    recording.seen.clear()
    made = await ensure_check_run(gh, scene.repo, scene.head, OP, RUNNING, unwritten=True)
    assert [line.split()[0] for line in recording.seen] == ["POST", "GET"]
    assert made.created
    assert runs_in(scene) == [(made.id, OP.token, "in_progress", None, "Reproducing")]


async def test_racing_first_writes_converge_on_the_oldest_run(scene: Scene) -> None:
    results = await asyncio.gather(
        *(
            ensure_check_run(scene.gh, scene.repo, scene.head, OP, RUNNING, unwritten=True)
            for _ in range(2)
        )
    )
    counting = [run for run in runs_in(scene) if run[3] != "skipped"]
    assert len(counting) == 1 and {r.id for r in results} == {counting[0][0]}


async def test_a_later_attempt_of_a_first_write_finds_the_earlier_attempts_run(
    scene: Scene, db_engine: Engine
) -> None:
    """The first attempt created the check run and died before its result was
    recorded: the next attempt lists the commit's check runs first and
    creates nothing."""
    recording = Recording(httpx.ASGITransport(app=scene.emulator.asgi()))
    access = GitHubAccess(scene.new_factory(transport=recording), "http://git.invalid")
    activities = GitHubActivities(access, DatabaseEvidenceStore(db_engine), Settings())
    write = body(activities, "github.check_run")
    raw = CheckRunInput(
        repo="octo/demo",
        installation_id=scene.installation_id,
        op_run=OP.run,
        op_step=OP.step,
        head_sha=scene.head,
        name=RUNNING.name,
        title=RUNNING.title,
        summary=RUNNING.summary,
        first_write=True,
    ).model_dump(mode="json")
    first = await write.fn(RecordingContext(Dependencies(), attempt=1), raw)
    recording.seen.clear()
    again = await write.fn(RecordingContext(Dependencies(), attempt=2), raw)
    assert not [line for line in recording.seen if line.startswith("POST")]
    assert again["id"] == first["id"]
    assert [run[0] for run in runs_in(scene)] == [first["id"]]
