"""What GitHub does on its own reaches the right run: renames and transfers
(runs are keyed by repository id), issue moves and deletions, repository
and installation deletions, and closes (decided by a triage workflow).

Through the real intake over HTTP and a real database; the workflows are
stand-ins that keep what they were given (tests/web/support.py).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from sqlalchemy import select

from app.app_tables import InstallationRepository
from app.contracts.ids import legacy_repair_workflow_id, repair_workflow_id
from app.contracts.triage_inputs import INSTALLATION_RESUMED, ISSUE_DELETED, REPOSITORY_MOVED
from app.engine._store.schema import signals
from tests.web.conftest import web  # noqa: F401 (the fixture)
from tests.web.support import example

INSTALLATION = 4242


def _labeled(label: str = "repairbot") -> dict[str, Any]:
    payload = example("issues", "labeled")
    payload["label"]["name"] = label
    payload["installation"] = {"id": INSTALLATION}
    return payload


def _request(payload: dict[str, Any], installation: int = INSTALLATION) -> dict[str, Any]:
    return {
        "repo": payload["repository"]["full_name"],
        "repo_id": payload["repository"]["id"],
        "default_branch": "main",
        "clone_url": "http://git/x.git",
        "installation_id": installation,
        "issue_number": payload["issue"]["number"],
        "issue_title": "t",
        "requested_by": "maya",
        "label": "repairbot",
    }


def _key(payload: dict[str, Any]) -> str:
    return repair_workflow_id(payload["repository"]["id"], payload["issue"]["number"])


def _renamed(payload: dict[str, Any], new_name: str) -> dict[str, Any]:
    """``payload`` as GitHub sends it after a rename: same id, new names."""
    moved = copy.deepcopy(payload)
    owner = moved["repository"]["owner"]["login"]
    moved["repository"]["name"] = new_name
    moved["repository"]["full_name"] = f"{owner}/{new_name}"
    return moved


def _repository_event(payload: dict[str, Any], action: str, **extra: Any) -> dict[str, Any]:
    return {
        "action": action,
        "repository": payload["repository"],
        "sender": payload["sender"],
        "installation": payload["installation"],
        **extra,
    }


def _review_of(payload: dict[str, Any]) -> dict[str, Any]:
    review = example("pull_request_review", "submitted")
    review["repository"] = payload["repository"]
    review["pull_request"]["head"]["ref"] = f"repairbot/issue-{payload['issue']['number']}"
    for side in ("head", "base"):
        review["pull_request"][side]["repo"] = {
            key: payload["repository"][key] for key in ("id", "name", "full_name")
        }
    return review


async def _signal_names(runtime: Any, run_id: str) -> list[str]:
    with runtime.store.engine.connect() as conn:
        rows = conn.execute(select(signals.c.name).where(signals.c.run_id == run_id))
        return [row.name for row in rows]


async def test_a_review_after_a_rename_reaches_the_run(web: Any) -> None:  # noqa: F811
    """Bug 6: the review of the run's pull request arrives with the new
    ``full_name``; a name key found no run and dropped it."""
    poster, runtime = web
    payload = _labeled()
    run = await runtime.start_workflow("repair", _key(payload), _request(payload))
    renamed = _renamed(payload, "renamed-repo")
    response = await poster.post("pull_request_review", _review_of(renamed))
    assert "delivered" in response.json()["message"], response.json()
    assert await _signal_names(runtime, run.run_id) == ["review"]


async def test_a_run_started_under_its_name_still_gets_its_events(web: Any) -> None:  # noqa: F811
    """A run the 0009 migration could not re-key (its input lacked the id)
    stays reachable under its name key."""
    poster, runtime = web
    payload = _labeled()
    legacy = legacy_repair_workflow_id(payload["repository"]["full_name"], 1)
    payload["issue"]["number"] = 1
    run = await runtime.start_workflow("repair", legacy, _request(payload) | {"repo_id": None})
    response = await poster.post("pull_request_review", _review_of(payload))
    assert "delivered" in response.json()["message"], response.json()
    assert await _signal_names(runtime, run.run_id) == ["review"]


async def test_a_same_name_repository_does_not_reach_a_run_of_another_id(
    web: Any,  # noqa: F811
) -> None:
    """A run left under its name key that recorded its repository's id (the
    0009 migration kept the older of two runs there) is that repository's: a
    different repository that took the name gets nothing; its own id does."""
    poster, runtime = web
    payload = _labeled()
    payload["issue"]["number"] = 1
    legacy = legacy_repair_workflow_id(payload["repository"]["full_name"], 1)
    original = payload["repository"]["id"] + 1000
    run = await runtime.start_workflow("repair", legacy, _request(payload) | {"repo_id": original})
    response = await poster.post("pull_request_review", _review_of(payload), delivery="r-1")
    assert "not delivered" in response.json()["message"], response.json()
    assert await _signal_names(runtime, run.run_id) == []
    own = copy.deepcopy(payload)
    own["repository"]["id"] = original
    response = await poster.post("pull_request_review", _review_of(own), delivery="r-2")
    assert await _signal_names(runtime, run.run_id) == ["review"]


async def test_rename_tells_the_run_its_new_name(web: Any, db_engine: Any) -> None:  # noqa: F811
    poster, runtime = web
    payload = _labeled()
    run = await runtime.start_workflow("repair", _key(payload), _request(payload))
    installed = example("installation", "created")
    installed["repositories"] = [
        {key: payload["repository"][key] for key in ("id", "name", "full_name")}
    ]
    installed["installation"]["id"] = INSTALLATION
    await poster.post("installation", installed)
    renamed = _renamed(payload, "gadgets")
    event = _repository_event(
        renamed,
        "renamed",
        changes={"repository": {"name": {"from": payload["repository"]["name"]}}},
    )
    response = await poster.post("repository", event, delivery="rename-1")
    assert response.status_code == 202, response.text
    with db_engine.connect() as conn:
        [moved] = conn.execute(select(signals).where(signals.c.run_id == run.run_id)).all()
        table = InstallationRepository.__table__  # type: ignore[attr-defined]
        names = conn.execute(select(table.c.full_name)).scalars().all()
    assert moved.name == REPOSITORY_MOVED
    assert moved.payload["full_name"] == renamed["repository"]["full_name"]
    assert moved.payload["clone_url"].endswith(f"/{renamed['repository']['full_name']}.git")
    assert names == [renamed["repository"]["full_name"]]
    # A transfer (new owner, same id) tells it too; a redelivery does not twice.
    await poster.post("repository", _repository_event(renamed, "transferred"), delivery="t-1")
    await poster.post("repository", _repository_event(renamed, "transferred"), delivery="t-1")
    assert await _signal_names(runtime, run.run_id) == [REPOSITORY_MOVED, REPOSITORY_MOVED]


async def test_repository_deletion_ends_its_runs_only(web: Any) -> None:  # noqa: F811
    poster, runtime = web
    payload = _labeled()
    run = await runtime.start_workflow("repair", _key(payload), _request(payload))
    other = copy.deepcopy(payload)
    other["repository"]["id"] += 1
    kept = await runtime.start_workflow("repair", _key(other), _request(other))
    response = await poster.post("repository", _repository_event(payload, "deleted"))
    assert response.status_code == 202
    ended = runtime.store.load_run(run.run_id)
    assert ended.status == "terminated"
    assert "nothing is left on GitHub to clean up" in ended.error["reason"]
    assert runtime.store.load_run(kept.run_id).status == "running"


async def test_uninstalling_ends_the_installations_runs(
    web: Any,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing of the runs can be cleaned without the installation: they end
    at once, their records say why, and the delivery's log line names them."""
    poster, runtime = web
    payload = _labeled()
    run = await runtime.start_workflow("repair", _key(payload), _request(payload))
    other = copy.deepcopy(payload)
    other["issue"]["number"] += 1
    kept = await runtime.start_workflow("repair", _key(other), _request(other, installation=7))
    deleted = example("installation", "deleted")
    deleted["installation"]["id"] = INSTALLATION
    with caplog.at_level(logging.INFO, "repairbot.web"):
        response = await poster.post("installation", deleted, delivery="uninstall-1")
    assert response.status_code == 202
    [line] = [r.getMessage() for r in caplog.records if "uninstall-1" in r.getMessage()]
    assert f"{_key(payload)}: ended (the app was uninstalled" in line
    ended = runtime.store.load_run(run.run_id)
    assert ended.status == "terminated"
    assert "uninstalled" in ended.error["reason"]
    assert "nothing is left on GitHub to clean up" in ended.error["reason"]
    assert runtime.store.load_run(kept.run_id).status == "running"


async def test_a_transferred_issue_takes_its_run_along(web: Any) -> None:  # noqa: F811
    poster, runtime = web
    payload = _labeled()
    run = await runtime.start_workflow("repair", _key(payload), _request(payload))
    new = copy.deepcopy(payload)
    new["repository"]["id"] += 100
    new["repository"]["name"] = "elsewhere"
    new["repository"]["full_name"] = f"{new['repository']['owner']['login']}/elsewhere"
    new["issue"]["number"] = 3
    transfer = copy.deepcopy(payload)
    transfer["action"] = "transferred"
    del transfer["label"]
    transfer["changes"] = {"new_issue": new["issue"], "new_repository": new["repository"]}
    response = await poster.post("issues", transfer)
    assert "moved" in response.json()["message"], response.json()
    found = runtime.store.find_run(_key(new))
    assert found is not None and found.run_id == run.run_id
    # Later events about the new issue reach it.
    response = await poster.post("pull_request_review", _review_of(new))
    assert "delivered" in response.json()["message"], response.json()


async def test_a_deleted_issue_cancels_its_run(web: Any) -> None:  # noqa: F811
    poster, runtime = web
    payload = _labeled()
    run = await runtime.start_workflow("repair", _key(payload), _request(payload))
    deleted = copy.deepcopy(payload)
    deleted["action"] = "deleted"
    del deleted["label"]
    await poster.post("issues", deleted)
    cancelling = runtime.store.load_run(run.run_id)
    assert cancelling.status == "cancelling"
    events = runtime.store.load_events(run.run_id)
    [requested] = [e for e in events if e.type == "cancel_requested"]
    assert "the issue was deleted" in requested.data["reason"]
    # Told first, so the run's cleanup writes no comment on an issue that is gone.
    [told] = [e for e in events if e.type == "signal_received"]
    assert told.data["name"] == ISSUE_DELETED and told.seq < requested.seq


async def test_unsuspend_tells_the_installations_open_runs(web: Any) -> None:  # noqa: F811
    """``installation.unsuspend`` wakes every open run of the installation
    waiting out the suspension (a repair run, and a run whose input carries
    the run request, as the command and triage runs do); another
    installation's run hears nothing, and a redelivery nothing more."""
    poster, runtime = web
    payload = _labeled()
    repair = await runtime.start_workflow("repair", _key(payload), _request(payload))
    nested = await runtime.start_workflow("repair", "command:7", {"request": _request(payload)})
    other = copy.deepcopy(payload)
    other["issue"]["number"] += 1
    elsewhere = await runtime.start_workflow("repair", _key(other), _request(other, installation=7))
    for action in ("suspend", "unsuspend", "unsuspend"):
        event = example("installation", "deleted") | {"action": action}
        event["installation"]["id"] = INSTALLATION
        delivery = "unsuspend-1" if action == "unsuspend" else "suspend-1"
        # 202 handled, 200 a redelivery answered from the record.
        assert (await poster.post("installation", event, delivery=delivery)).status_code in (
            200,
            202,
        )
    for run in (repair, nested):
        assert await _signal_names(runtime, run.run_id) == [INSTALLATION_RESUMED]
    assert await _signal_names(runtime, elsewhere.run_id) == []


async def test_a_close_goes_to_triage_not_straight_to_cancel(web: Any) -> None:  # noqa: F811
    """Issue 19 item 7 and bug 5: whether a close cancels needs GitHub (the
    closer's permission, whether the run's PR merged), so the handler only
    starts a close triage; repairbot's own close and an issue without a run
    start nothing."""
    poster, runtime = web
    payload = _labeled()
    closed = copy.deepcopy(payload)
    closed["action"] = "closed"
    closed["issue"]["state"] = "closed"
    del closed["label"]
    response = await poster.post("issues", closed, delivery="close-0")
    assert "no active run" in response.json()["message"]
    run = await runtime.start_workflow("repair", _key(payload), _request(payload))
    ours = copy.deepcopy(closed)
    ours["sender"] = ours["sender"] | {"login": "repairbot[bot]", "type": "Bot"}
    response = await poster.post("issues", ours, delivery="close-1")
    assert "repairbot itself" in response.json()["message"]
    response = await poster.post("issues", closed, delivery="close-2")
    triage = runtime.store.find_run("triage:close-2")
    assert triage.workflow_name == "close-triage"
    assert triage.input["closer"] == closed["sender"]["login"]
    assert runtime.store.load_run(run.run_id).status == "running"
