"""One check run per operation on a commit, found by ``external_id`` = the operation token.

Check runs cannot be deleted, so if two racing workers each created one, the
oldest (lowest id) is kept and updated, and any younger copy is completed as
``skipped`` with a note pointing at the one that counts.

Once a caller knows the check run's id (an earlier call for the same
operation and commit returned it), the next update goes straight to it
(:func:`update_check_run`): one request instead of listing the commit's check
runs and updating.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from githubkit.exception import GitHubException
from githubkit.response import Response
from githubkit.rest.paginator import Paginator
from githubkit.typing import Missing
from githubkit.utils import UNSET
from githubkit_schemas.v2026_03_10.models import (
    CheckRun,
    ReposOwnerRepoCommitsRefCheckRunsGetResponse200,
)

from app.github.client import InstallationGitHub
from app.github.errors import classified, classify, no_answer, status_of
from app.github.markers import OpId
from app.github.repos import RepoRef

Conclusion = Literal[
    "action_required", "cancelled", "failure", "neutral", "success", "skipped", "timed_out"
]


@dataclass(frozen=True)
class CheckRunResult:
    id: int
    html_url: str | None
    created: bool


def _runs(response: Response[ReposOwnerRepoCommitsRefCheckRunsGetResponse200]) -> list[CheckRun]:
    return response.parsed_data.check_runs


async def find_check_runs(
    gh: InstallationGitHub,
    repo: RepoRef,
    head_sha: str,
    op: OpId,
    *,
    name: str,
    app_id: int | None = None,
) -> list[CheckRun]:
    """Check runs named ``name`` on ``head_sha`` whose external id is ``op``, oldest first."""
    pages: Paginator[CheckRun] = gh.rest.paginate(
        gh.rest.checks.async_list_for_ref,
        map_func=_runs,
        owner=repo.owner,
        repo=repo.name,
        ref=head_sha,
        check_name=name,
        # "latest" would hide an older duplicate, which is the one we keep.
        filter_="all",
        per_page=100,
        app_id=UNSET if app_id is None else app_id,
    )
    with classified(mutation=False):
        runs = [run async for run in pages if run.external_id == op.token]
    return sorted(runs, key=lambda run: run.id)


@dataclass(frozen=True)
class CheckRunView:
    """What the check run should show. No ``conclusion``: in progress; with one: completed."""

    name: str
    title: str
    summary: str
    conclusion: Conclusion | None = None
    details_url: str | None = None

    def shown_by(self, run: CheckRun) -> bool:
        """Whether ``run`` already shows exactly this (no update needed)."""
        status = "in_progress" if self.conclusion is None else "completed"
        return (
            run.status == status
            and run.conclusion == self.conclusion
            and run.output.title == self.title
            and run.output.summary == self.summary
            and (self.details_url is None or run.details_url == self.details_url)
        )


async def _create(
    gh: InstallationGitHub, repo: RepoRef, head_sha: str, op: OpId, view: CheckRunView
) -> CheckRun:
    # Two calls because the API types a completed run (conclusion required) apart.
    url: Missing[str] = view.details_url or UNSET
    if view.conclusion is None:
        response = await gh.rest.checks.async_create(
            repo.owner,
            repo.name,
            name=view.name,
            head_sha=head_sha,
            external_id=op.token,
            details_url=url,
            status="in_progress",
            output={"title": view.title, "summary": view.summary},
        )
    else:
        response = await gh.rest.checks.async_create(
            repo.owner,
            repo.name,
            name=view.name,
            head_sha=head_sha,
            external_id=op.token,
            details_url=url,
            status="completed",
            conclusion=view.conclusion,
            output={"title": view.title, "summary": view.summary},
        )
    return response.parsed_data


async def _patch(gh: InstallationGitHub, repo: RepoRef, run_id: int, view: CheckRunView) -> None:
    url: Missing[str] = view.details_url or UNSET
    if view.conclusion is None:
        await gh.rest.checks.async_update(
            repo.owner,
            repo.name,
            run_id,
            details_url=url,
            status="in_progress",
            output={"title": view.title, "summary": view.summary},
        )
    else:
        await gh.rest.checks.async_update(
            repo.owner,
            repo.name,
            run_id,
            details_url=url,
            status="completed",
            conclusion=view.conclusion,
            output={"title": view.title, "summary": view.summary},
        )


async def _update(gh: InstallationGitHub, repo: RepoRef, run_id: int, view: CheckRunView) -> None:
    with classified(mutation=True):
        await _patch(gh, repo, run_id, view)


async def _keep_oldest(
    gh: InstallationGitHub,
    repo: RepoRef,
    found: list[CheckRun],
    view: CheckRunView,
    *,
    created: bool,
) -> CheckRunResult:
    keep, *extra = found
    for duplicate in extra:
        if duplicate.conclusion != "skipped":
            await _update(gh, repo, duplicate.id, _superseded(view.name, keep.id))
    if not view.shown_by(keep):
        await _update(gh, repo, keep.id, view)
    return CheckRunResult(keep.id, keep.html_url, created=created)


def _superseded(name: str, keep_id: int) -> CheckRunView:
    return CheckRunView(name, "Duplicate", f"Superseded by check run {keep_id}.", "skipped")


async def ensure_check_run(
    gh: InstallationGitHub,
    repo: RepoRef,
    head_sha: str,
    op: OpId,
    view: CheckRunView,
    *,
    app_id: int | None = None,
    unwritten: bool = False,
) -> CheckRunResult:
    """Create or update the check run for ``op`` on ``head_sha`` so it shows ``view``.

    ``app_id`` (ours) narrows the search to our App's runs. ``unwritten``:
    the caller knows nothing has written ``op``'s check run on ``head_sha``
    yet (its first write, on the first attempt of its task), so it is created
    without listing the commit's check runs first; the listing after the
    create still finds a racing twin's.
    """
    if not unwritten:
        found = await find_check_runs(gh, repo, head_sha, op, name=view.name, app_id=app_id)
        if found:
            return await _keep_oldest(gh, repo, found, view, created=False)
    try:
        mine = await _create(gh, repo, head_sha, op, view)
    except GitHubException as exc:
        if not no_answer(exc):
            raise classify(exc, mutation=True) from exc
        found = await find_check_runs(gh, repo, head_sha, op, name=view.name, app_id=app_id)
        if not found:
            raise classify(exc, mutation=True) from exc
        return await _keep_oldest(gh, repo, found, view, created=True)
    found = await find_check_runs(gh, repo, head_sha, op, name=view.name, app_id=app_id)
    if not found:  # a list lagging behind the create: ours is all we know of
        return CheckRunResult(mine.id, mine.html_url, created=True)
    # A twin may have raced us; the oldest run counts, younger ones are marked skipped.
    return await _keep_oldest(gh, repo, found, view, created=found[0].id == mine.id)


async def update_check_run(
    gh: InstallationGitHub,
    repo: RepoRef,
    run_id: int,
    head_sha: str,
    op: OpId,
    view: CheckRunView,
    *,
    app_id: int | None = None,
) -> CheckRunResult:
    """Make the check run ``run_id``, which an earlier call for ``op`` on
    ``head_sha`` returned, show ``view`` in one request. GitHub never deletes a
    check run, but should the id be unknown to it (404) the run is found or
    made as :func:`ensure_check_run` does.

    A repeated update (a retry after a lost answer or a crash) writes the same
    view again: nothing doubles, so this needs no read before it.
    """
    try:
        await _patch(gh, repo, run_id, view)
    except GitHubException as exc:
        if status_of(exc) != 404:
            raise classify(exc, mutation=True) from exc
        return await ensure_check_run(gh, repo, head_sha, op, view, app_id=app_id)
    return CheckRunResult(run_id, None, created=False)
