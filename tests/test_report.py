"""The repair run's words are a function of its state: they never claim a pull
request is absent while one is open, and they always say what to do next."""

from __future__ import annotations

from app.workflows.report import OUTCOMES, check_conclusion, status_comment
from app.workflows.state import PullState, RunState


def _state(**changes: object) -> RunState:
    state = RunState(
        run_id="repair:o/r#1/1",
        policy_version="p",
        repo="o/r",
        issue_number=1,
        base_branch="main",
        base_sha="a" * 40,
    )
    return state.model_copy(update=changes)


def test_budget_exhausted_after_a_review_shows_the_open_pull_request() -> None:
    state = _state(
        outcome="budget-exhausted",
        proposed_sha="b" * 40,
        pull=PullState(number=5, url="https://x/pull/5", state="open"),
    )
    body = status_comment(state)
    assert "Pull request: #5 (open)" in body
    assert "No pull request was opened" not in body
    assert "**What you can do:**" in body
    assert check_conclusion(state) == "failure"


def test_an_ending_without_a_pull_request_says_so() -> None:
    body = status_comment(_state(outcome="not-reproduced"))
    assert "No pull request was opened." in body
    assert "No pull request" not in status_comment(_state())  # still working: no claim


def test_every_outcome_has_words_and_a_conclusion() -> None:
    for outcome in OUTCOMES:
        state = _state(outcome=outcome)
        assert OUTCOMES[outcome][0] in status_comment(state)
        assert check_conclusion(state) in ("success", "failure", "cancelled", "neutral")
    assert check_conclusion(_state(outcome="merged")) == "success"
    assert check_conclusion(_state(outcome="cancelled")) == "cancelled"
    assert check_conclusion(_state(outcome="review-timed-out", proposed_sha="c" * 40)) == "neutral"


def test_budgets_are_shown_spent_and_allowed() -> None:
    state = _state()
    state.usage.attempts = 2
    state.usage.input_tokens, state.usage.output_tokens = 1000, 500
    state.limits.max_tokens = 10_000
    body = status_comment(state)
    assert "Repair attempts: 2 of 3" in body
    assert "Model tokens: 1500 of 10000" in body
