"""One review model (app/contracts/requests.Review): the webhook's signal and
the drift check's read carry the same fields, and old recordings still load."""

from __future__ import annotations

from app.contracts.github import ObserveResult
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
