"""Webhook intake over HTTP: verify, record, route, answer; redeliveries are no-ops."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select

from app.app_tables import Installation
from app.contracts.ids import repair_workflow_id
from app.engine._store.schema import runs, signals
from tests.web.support import EXAMPLES, example

ALL_EXAMPLES = sorted(p for p in EXAMPLES.glob("*/*.json"))


@pytest.mark.parametrize("path", ALL_EXAMPLES, ids=lambda p: f"{p.parent.name}.{p.stem}")
async def test_every_real_example_is_accepted_and_routed(
    web: Any, deliveries: Any, path: Any
) -> None:
    poster, _ = web
    response = await poster.post(path.parent.name, json.loads(path.read_text()))
    assert response.status_code == 202, response.text
    [row] = deliveries()
    assert row.status in ("handled", "ignored"), row.detail
    assert row.event == path.parent.name


async def test_wrong_signature_is_refused_and_nothing_recorded(web: Any, deliveries: Any) -> None:
    poster, _ = web
    response = await poster.post("issues", example("issues", "labeled"), secret="not-the-secret")
    assert response.status_code == 401
    assert deliveries() == []


async def test_malformed_bodies_get_400(web: Any, deliveries: Any) -> None:
    poster, _ = web
    assert (await poster.post("issues", b"{not json")).status_code == 400
    assert (await poster.post("issues", b"[1, 2]")).status_code == 400
    missing_issue = example("issues", "labeled")
    del missing_issue["issue"]
    response = await poster.post("issues", missing_issue)
    assert response.status_code == 400
    assert "issue" in response.json()["message"]
    # Signed, so kept for inspection, but never routed.
    assert {r.status for r in deliveries()} == {"malformed"}


async def test_unknown_event_is_acknowledged_and_ignored(web: Any, deliveries: Any) -> None:
    poster, _ = web
    response = await poster.post("star", {"action": "created", "sender": {"login": "a", "id": 1}})
    assert response.status_code == 202
    assert deliveries()[0].status == "ignored"


def _labeled(label: str = "repairbot") -> dict[str, Any]:
    payload = example("issues", "labeled")
    payload["label"]["name"] = label
    payload["installation"] = {"id": 4242}
    return payload


def _issue_run(payload: dict[str, Any]) -> str:
    return repair_workflow_id(payload["repository"]["id"], payload["issue"]["number"])


async def _start_repair(runtime: Any, payload: dict[str, Any], label: str = "repairbot") -> Any:
    """The run a label triage would start (the stand-in triage starts none)."""
    request = {
        "repo": payload["repository"]["full_name"],
        "repo_id": payload["repository"]["id"],
        "default_branch": "main",
        "clone_url": "http://git/x.git",
        "installation_id": 4242,
        "issue_number": payload["issue"]["number"],
        "issue_title": "t",
        "requested_by": "maya",
        "label": label,
    }
    return await runtime.start_workflow("repair", _issue_run(payload), request)


async def test_a_label_starts_one_triage_per_delivery(web: Any, db_engine: Any) -> None:
    """Whether a label triggers is the repository's config, read by a triage
    workflow keyed by the delivery (app/workflows/triage.py): no run exists
    before it decided, so another label cannot hold the issue's run slot."""
    poster, runtime = web
    payload = _labeled()
    first = await poster.post("issues", payload, delivery="d-1")
    again = await poster.post("issues", payload, delivery="d-1")  # GitHub redelivery
    relabel = await poster.post("issues", payload, delivery="d-2")  # a new labelling
    assert (first.status_code, again.status_code, relabel.status_code) == (202, 200, 202)
    with db_engine.connect() as conn:
        names = conn.execute(select(runs.c.workflow_name)).scalars().all()
    assert sorted(names) == ["label-triage", "label-triage"]
    triage = runtime.store.find_run("triage:d-1")
    request = triage.input["request"]
    assert request["installation_id"] == 4242 and request["label"] == "repairbot"
    assert request["repo_id"] == payload["repository"]["id"]
    assert triage.input["default_trigger"] == "repairbot"


async def test_any_label_goes_to_triage_but_never_ours(web: Any) -> None:
    poster, runtime = web
    response = await poster.post("issues", _labeled("bug"))
    assert "started" in response.json()["message"]
    [run] = runtime.store.list_runs()
    assert run.workflow_name == "label-triage" and run.input["request"]["label"] == "bug"
    ours = _labeled("bug")
    ours["sender"] = ours["sender"] | {"login": "repairbot[bot]", "type": "Bot"}
    response = await poster.post("issues", ours)
    assert "by repairbot itself" in response.json()["message"]


async def test_unlabel_cancels_the_run(web: Any) -> None:
    poster, runtime = web
    await _start_repair(runtime, _labeled())
    unlabel = _labeled()
    unlabel["action"] = "unlabeled"
    await poster.post("issues", unlabel)
    run = runtime.store.find_run(_issue_run(unlabel))
    assert run.status == "cancelling" and run.cancel_phase == "cancel-requested"


async def test_reviews_on_bot_prs_become_deduplicated_signals(web: Any, db_engine: Any) -> None:
    poster, runtime = web
    await _start_repair(runtime, _labeled())
    labeled = _labeled()
    review = example("pull_request_review", "submitted")
    review["repository"] = labeled["repository"]
    review["pull_request"]["head"]["ref"] = f"repairbot/issue-{labeled['issue']['number']}"
    await poster.post("pull_request_review", review, delivery="r-1")
    await poster.post("pull_request_review", review, delivery="r-2")  # same review, new delivery
    with db_engine.connect() as conn:
        rows = conn.execute(select(signals.c.name, signals.c.dedupe_key, signals.c.payload)).all()
    assert len(rows) == 1
    assert rows[0].dedupe_key == f"review:{review['review']['id']}:submitted"
    assert rows[0].payload["commit_id"] == review["review"]["commit_id"]
    assert rows[0].payload["state"] == review["review"]["state"].lower()


async def test_installation_events_keep_installations_current(web: Any, db_engine: Any) -> None:
    poster, _ = web
    created = example("installation", "created")
    await poster.post("installation", created)
    await poster.post("installation", created | {"action": "suspend"})
    await poster.post("installation", created | {"action": "deleted"})
    table = Installation.__table__  # type: ignore[attr-defined]
    with db_engine.connect() as conn:
        [row] = conn.execute(select(table)).all()
    assert row.status == "deleted"


async def test_comment_with_command_starts_a_command_workflow(web: Any) -> None:
    poster, runtime = web
    payload = example("issue_comment", "created")
    payload["comment"]["body"] = "Thanks!\n\n/repair cancel\n"
    payload["installation"] = {"id": 1}
    response = await poster.post("issue_comment", payload, delivery="c-1")
    assert response.status_code == 202
    run = runtime.store.find_run(f"command:{payload['comment']['id']}")
    assert run.input["command"] == {"verb": "cancel", "args": ""}
    assert run.input["author"] == payload["comment"]["user"]["login"]


async def test_a_comment_replayed_under_a_new_delivery_id_does_nothing(web: Any) -> None:
    """A captured, signed comment sent again with another delivery id is a new
    delivery (recorded) but the same comment: its command ran once already."""
    poster, runtime = web
    payload = example("issue_comment", "created")
    payload["comment"]["body"] = "/repair cancel\n"
    payload["installation"] = {"id": 1}
    await poster.post("issue_comment", payload, delivery="c-first")
    run = runtime.store.find_run(f"command:{payload['comment']['id']}")
    response = await poster.post("issue_comment", payload, delivery="c-replayed")
    assert response.status_code == 202
    assert "already handled" in response.json()["message"]
    commands = [r for r in runtime.store.list_runs() if r.workflow_name == "slash-command"]
    assert [r.run_id for r in commands] == [run.run_id]


async def test_quoted_or_fenced_commands_are_not_commands(web: Any) -> None:
    poster, runtime = web
    payload = example("issue_comment", "created")
    payload["comment"]["body"] = "> /repair cancel\n\n```\n/repair\n```\n"
    payload["installation"] = {"id": 1}
    await poster.post("issue_comment", payload, delivery="c-2")
    assert runtime.store.find_run(f"command:{payload['comment']['id']}") is None


def test_the_real_examples_are_all_here() -> None:
    # A missing data folder must fail loudly, not parametrize to zero tests.
    assert len(ALL_EXAMPLES) >= 20, f"webhook examples not found under {EXAMPLES}"
