"""Check runs (and the check suite GitHub groups them into)."""

from __future__ import annotations

from emulator.render.base import Json, Urls, app, node_id, ts
from emulator.render.pulls import PullGit
from emulator.state import CheckRun, PullRequest, Repo, Store


def _pr_minimal(urls: Urls, repo: Repo, pr: PullRequest, git: PullGit) -> Json:
    brief = {"id": repo.id, "url": urls.repo_api(repo), "name": repo.name}
    return {
        "url": f"{urls.repo_api(repo)}/pulls/{pr.number}",
        "id": pr.id,
        "number": pr.number,
        "head": {"ref": pr.head_ref, "sha": git.head_sha, "repo": brief},
        "base": {"ref": pr.base_ref, "sha": git.base_sha, "repo": brief},
    }


def check_run(
    urls: Urls,
    store: Store,
    repo: Repo,
    run: CheckRun,
    pulls: list[tuple[PullRequest, PullGit]],
    head_branch: str | None,
) -> Json:
    api = f"{urls.repo_api(repo)}/check-runs/{run.id}"
    the_app = app(urls, store.apps[run.app_id])
    prs = [_pr_minimal(urls, repo, pr, git) for pr, git in pulls]
    return {
        "id": run.id,
        "node_id": node_id("CheckRun", run.id),
        "head_sha": run.head_sha,
        "external_id": run.external_id or "",
        "url": api,
        "html_url": f"{urls.repo_web(repo)}/runs/{run.id}",
        "details_url": run.details_url or the_app["html_url"],
        "status": run.status,
        "conclusion": run.conclusion,
        "started_at": ts(run.started_at),
        "completed_at": ts(run.completed_at),
        "output": {
            "title": run.output.get("title"),
            "summary": run.output.get("summary"),
            "text": run.output.get("text"),
            "annotations_count": 0,
            "annotations_url": f"{api}/annotations",
        },
        "name": run.name,
        "check_suite": {
            "id": run.suite_id,
            "node_id": node_id("CheckSuite", run.suite_id),
            "head_branch": head_branch,
            "head_sha": run.head_sha,
            "status": run.status,
            "conclusion": run.conclusion,
            "url": f"{urls.repo_api(repo)}/check-suites/{run.suite_id}",
            "before": None,
            "after": run.head_sha,
            "pull_requests": prs,
            "app": the_app,
            "created_at": ts(run.started_at),
            "updated_at": ts(run.completed_at or run.started_at),
        },
        "app": the_app,
        "pull_requests": prs,
    }
