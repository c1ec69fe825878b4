"""A pull request's reviews: every page of them.

GitHub lists at most 100 reviews per page. A run waiting for review reads
them to notice an approval whose webhook was lost; on a busy pull request
(bots that comment on every push, long review threads) the approval that
matters can be the 101st, so the read follows the ``Link`` header to the end.
"""

from __future__ import annotations

from githubkit.rest.paginator import Paginator
from githubkit_schemas.v2026_03_10.models import PullRequestReview

from app.github.client import InstallationGitHub
from app.github.errors import classified
from app.github.repos import RepoRef


async def list_reviews(
    gh: InstallationGitHub, repo: RepoRef, number: int
) -> list[PullRequestReview]:
    """Every review of pull request ``number``, oldest first (GitHub's order)."""
    pages: Paginator[PullRequestReview] = gh.rest.paginate(
        gh.rest.pulls.async_list_reviews,
        owner=repo.owner,
        repo=repo.name,
        pull_number=number,
        per_page=100,
    )
    with classified(mutation=False):
        return [review async for review in pages]
