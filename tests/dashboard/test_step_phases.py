"""The run timeline puts the steps the merge and confirming phases added where
they belong (a rebuild's commit and push are the merge's, not publishing)."""

from __future__ import annotations

import pytest

from app.operations.runs_view import phase_of_step


@pytest.mark.parametrize(
    "step,phase",
    [
        ("commit-1", "publishing"),
        ("commit-rebase-2", "merging"),
        ("push-rebase-2", "merging"),
        ("check-superseded-rebase-2", "merging"),
        ("base-compare-1", "merging"),
        ("evidence-recheck-3", "merging"),
        ("approver-recheck-1", "merging"),
        ("evidence-41", "awaiting-review"),
        ("policy-41", "awaiting-review"),
        ("confirm-trees", "confirming"),
        ("confirm-reproduce", "confirming"),
        ("propose-revert", "confirming"),
        ("propose-1", "repairing"),
        ("issue-now", "preparing"),
    ],
)
def test_new_steps_have_their_phase(step: str, phase: str) -> None:
    assert phase_of_step(step, "some.activity") == phase
