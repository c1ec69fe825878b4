"""The repair run's installation slot on the kit: a slot it took is given
back while it waits for a review and at its end; a grant that took none (the
active-run cap off) has nothing to give back. The caps' own rules over a real
database are in tests/test_installation_caps.py."""

from __future__ import annotations

import pytest

from tests.workflows.repair_scenario import merged_fakes, run_approved


@pytest.mark.parametrize(("taken", "releases"), [(True, 2), (False, 0)])
async def test_only_a_taken_slot_is_released(kit_db_url: str, taken: bool, releases: int) -> None:
    fakes = merged_fakes().on("caps.take_slot", {"granted": True, "slot_taken": taken})
    run = await run_approved(fakes, kit_db_url)
    assert run.result["outcome"] == "merged", run.result
    # Asked before the working phases and again before merging, either way.
    assert len(fakes.calls_to("caps.take_slot")) == 2
    assert len(fakes.calls_to("caps.release_slot")) == releases
