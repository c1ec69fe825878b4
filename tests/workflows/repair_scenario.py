"""The repair workflow under the kit: a request, and fakes answering as the
real stack answered in a recorded run (tests/histories/), so each test only
states what differs from the recorded merge."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from app.engine import RunRow
from app.engine.testing import Call, FakeActivities, WorkflowEnvironment
from app.main.catalog import build_registry

HISTORIES = Path(__file__).parent.parent / "histories"


def recorded(name: str) -> dict[str, Any]:
    history: dict[str, Any] = json.loads((HISTORIES / f"{name}.json").read_text())
    return history


#: A run recorded on the whole stack (emulator, git, sandbox, agent): labelled,
#: reproduced, repaired, verified, published, approved, merged, confirmed.
MERGED = recorded("repair_v2_merged_and_confirmed")
WORKFLOW_ID: str = MERGED["workflow_id"]
REQUEST: dict[str, Any] = MERGED["events"][0]["data"]["input"]


def _result(activity: str) -> Any:
    return next(
        e["data"]["result"]
        for e in MERGED["events"]
        if e["type"] == "activity_completed" and e["data"]["activity"] == activity
    )


PROPOSED_SHA: str = _result("github.build_commit")["sha"]
PULL_NUMBER: int = _result("github.pull_request")["number"]
BASE_SHA: str = _result("github.branch_head")["sha"]


#: The proposal's pull request as GitHub shows it while the run waits for a review.
OPEN_PULL: dict[str, Any] = {
    "number": PULL_NUMBER,
    "state": "open",
    "merged": False,
    "draft": True,
    "head_sha": PROPOSED_SHA,
    "merge_commit_sha": None,
}


def merged_fakes() -> FakeActivities:
    """Every activity answers as in the recorded merge; proposals go to the
    proposal organization's fork (recorded after that run)."""
    fakes = (
        FakeActivities()
        .on("github.proposal_repo", {"repo": "octo-repairbot/slugify", "refused": None})
        .on("caps.take_slot", {"granted": True, "active": 1})
        .on("caps.release_slot", {"released": True})
        # Not in the recorded merge: what a cancel reads and closes.
        .on("github.read_pull", OPEN_PULL)
        .on("github.close_pull", {"closed": True})
    )
    return fakes.from_history(MERGED)


def review(
    state: str = "approved",
    *,
    commit: str = PROPOSED_SHA,
    reviewer: str = "maya",
    review_id: int = 700001,
    action: str = "submitted",
    body: str = "Looks right.",
) -> dict[str, Any]:
    """The ``review`` signal's payload, as handlers/pull_request_review.py sends it."""
    return {
        "action": action,
        "review_id": review_id,
        "state": state,
        "commit_id": commit,
        "reviewer": reviewer,
        "body": body,
        "pull_number": PULL_NUMBER,
        "submitted_at": "2027-01-15T08:30:00+00:00",
    }


def review_key(payload: dict[str, Any]) -> str:
    return f"review:{payload['review_id']}:{payload['action']}"


@asynccontextmanager
async def repair_env(
    fakes: FakeActivities, database_url: str
) -> AsyncIterator[WorkflowEnvironment]:
    async with WorkflowEnvironment.start(build_registry(), fakes, database_url=database_url) as env:
        yield env


async def start_repair(env: WorkflowEnvironment, request: dict[str, Any] | None = None) -> str:
    return await env.start_workflow("repair", WORKFLOW_ID, request or REQUEST)


async def approve(env: WorkflowEnvironment, **overrides: Any) -> None:
    payload = review(**overrides)
    await env.signal(WORKFLOW_ID, "review", payload, dedupe_key=review_key(payload))


async def run_approved(fakes: FakeActivities, database_url: str) -> RunRow:
    """A run from its start to its end, approved as soon as it waits for a review."""
    async with repair_env(fakes, database_url) as env:
        await start_repair(env)
        await env.wait_phase(WORKFLOW_ID, "awaiting-review")
        await approve(env)
        return await env.wait_status(WORKFLOW_ID)


def recorded_result(activity: str, nth: int = 0) -> Any:
    """The ``nth`` result ``activity`` gave in the recorded merge."""
    results = [
        e["data"]["result"]
        for e in MERGED["events"]
        if e["type"] == "activity_completed" and e["data"]["activity"] == activity
    ]
    return results[nth]


def prepared(**config: Any) -> dict[str, Any]:
    """``workspace.prepare``'s recorded answer with these config settings changed."""
    answer = copy.deepcopy(recorded_result("workspace.prepare"))
    answer["config"].update(config)
    return answer


class Held:
    """An activity whose first call waits until the test releases it: the
    run stays in the phase that called it, with the activity in flight.
    Later calls answer ``then`` at once."""

    def __init__(self, then: Any = None) -> None:
        self._released = asyncio.Event()
        self._answer: Any = None
        self._then = then
        self._calls = 0

    def release(self, answer: Any) -> None:
        """Answer (a value, or an exception to raise) and let the attempt end."""
        self._answer = answer
        self._released.set()

    async def __call__(self, call: Call) -> Any:
        self._calls += 1
        if self._calls > 1:
            return self._then
        await self._released.wait()
        if isinstance(self._answer, BaseException):
            raise self._answer
        return self._answer


def status_body(fakes: FakeActivities) -> str:
    """The status comment as the run last wrote it."""
    bodies = [c.input["body"] for c in fakes.calls_to("github.comment")]
    assert bodies, "the run wrote no status comment"
    return str(bodies[-1])


def final_conclusion(fakes: FakeActivities) -> str | None:
    """The conclusion of the last check run the run wrote (None: none written)."""
    checks = fakes.inputs("github.check_run")
    return checks[-1].get("conclusion") if checks else None


def pull_closed(*, merged: bool, by: str = "maya") -> dict[str, Any]:
    """The ``pr_closed`` signal of handlers/pull_request.py."""
    sha = "5" * 40 if merged else None
    return {"number": PULL_NUMBER, "merged": merged, "merge_commit_sha": sha, "by": by}
