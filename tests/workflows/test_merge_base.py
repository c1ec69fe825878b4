"""The merge round's read of the base branch on the kit: the policy recheck
has just read the base's head (its config's digest is of that commit), so
the check whether the base moved since the approval takes that head instead
of reading it again, and a move it saw is not missed."""

from __future__ import annotations

from typing import Any

from app.engine.testing import Call
from tests.workflows.repair_scenario import (
    BASE_SHA,
    merged_fakes,
    recorded_result,
    run_approved,
)

MOVED = "b" * 40


async def test_the_merge_reads_the_base_head_once(kit_db_url: str) -> None:
    fakes = merged_fakes()
    run = await run_approved(fakes, kit_db_url)
    assert run.result["outcome"] == "merged", run.result
    # Only the preparation's read: the merge took the policy recheck's.
    assert [c.operation_id.rsplit(":", 1)[1] for c in fakes.calls_to("github.branch_head")] == [
        "base"
    ]


def policy(call: Call) -> dict[str, Any]:
    """The recheck at the merge finds the base moved on (the same config)."""
    answer = dict(recorded_result("github.policy_digest"))
    if call.operation_id.endswith(":policy-recheck-1"):
        answer["at"] = MOVED
    return answer


async def test_a_base_move_the_policy_recheck_saw_is_acted_on(kit_db_url: str) -> None:
    fakes = merged_fakes().on("github.policy_digest", policy)
    await run_approved(fakes, kit_db_url)
    # The proposal is rebuilt on the moved base, never merged as approved on the old one.
    assert [c.input["head"] for c in fakes.calls_to("github.compare")] == [MOVED]
    assert [c.input["base"] for c in fakes.calls_to("github.compare")] == [BASE_SHA]
    assert fakes.calls_to("github.merge") == []
