"""Reading a pull request's reviews follows every page (app/github/reviews.py)."""

from __future__ import annotations

from gh_scene import Scene

from app.github.markers import OpId
from app.github.pulls import ensure_pull_request
from app.github.reviews import list_reviews


async def test_an_approval_after_a_hundred_reviews_is_read(scene: Scene) -> None:
    """GitHub's page holds at most 100 reviews: the 101st (here the approval a
    waiting run must not miss) is on the second page."""
    await scene.client.push_as("alice", "octo", "demo", "fix", {"calc.py": "x = 1\n"})
    pr = await ensure_pull_request(
        scene.gh,
        scene.repo,
        head="fix",
        base="main",
        title="Fix",
        body="b",
        op=OpId("r", "pr"),
        bot_login=scene.bot_login,
    )
    for n in range(100):
        await scene.client.review(
            "octo", "demo", pr.number, as_user="alice", event="COMMENT", body=f"nit {n}"
        )
    await scene.client.review("octo", "demo", pr.number, as_user="alice", event="APPROVE")

    reviews = await list_reviews(scene.gh, scene.repo, pr.number)

    assert len(reviews) == 101
    assert [r.state for r in reviews[-2:]] == ["COMMENTED", "APPROVED"]
