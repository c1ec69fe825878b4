"""One review model (app/contracts/requests.Review) and one pull-request model
(app/contracts/github.PullView): what a webhook sends and what an activity
reads carry the same fields, and answers recorded before they were one still
load."""

from __future__ import annotations

from app.contracts.github import ObserveResult, PullView
from app.contracts.requests import Review, ReviewSignal

REVIEW = {
    "state": "approved",
    "commit_id": "bee55a9c8febf751c516d1e3c0d55808d1c4399a",
    "reviewer": "maya",
    "body": "Looks right.",
    "submitted_at": "2026-11-30T14:24:27+00:00",
}


def test_a_drift_check_recorded_with_id_still_loads() -> None:
    """Recorded before the models were one, a drift check's review named its id ``id``."""
    seen = ObserveResult.model_validate({"reviews": [{"id": 700001, **REVIEW}]})
    assert seen.reviews[0].review_id == 700001


def test_an_observed_review_is_the_signal_a_webhook_would_send() -> None:
    review = Review(review_id=7, **REVIEW)
    observed = review.observed(pull_number=3)
    webhook = ReviewSignal(action="submitted", pull_number=3, review_id=7, **REVIEW)
    assert observed.action == "observed"
    assert observed.model_dump(exclude={"action"}) == webhook.model_dump(exclude={"action"})


def test_a_signal_is_recorded_with_the_fields_it_always_had() -> None:
    signal = ReviewSignal(action="submitted", pull_number=3, review_id=7, **REVIEW)
    assert set(signal.model_dump(mode="json")) == {
        "action", "review_id", "state", "commit_id", "reviewer", "body", "pull_number",
        "submitted_at",
    }  # fmt: skip


def test_pull_requests_recorded_by_both_old_models_load() -> None:
    """``github.read_pull`` recorded a PullView without url and created;
    ``github.pull_request`` recorded a PullRequestResult without merge_commit_sha."""
    read = PullView.model_validate(
        {"number": 4, "state": "closed", "merged": True, "draft": False, "head_sha": "abc",
         "merge_commit_sha": "def"}
    )  # fmt: skip
    opened = PullView.model_validate(
        {"number": 4, "url": "https://x/pull/4", "head_sha": "abc", "state": "open",
         "merged": False, "created": True, "draft": True}
    )  # fmt: skip
    assert (read.merged, read.merge_commit_sha, read.url) == (True, "def", "")
    assert (opened.created, opened.url, opened.merge_commit_sha) == (True, "https://x/pull/4", None)
