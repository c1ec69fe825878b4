"""``GET /repos/{owner}/{repo}/contents/{path}``: one file at a ref, base64
encoded, as GitHub answers it (a directory or a missing path is 404 here:
repairbot reads single files only)."""

from __future__ import annotations

import base64

from emulator.gitview import open_git
from emulator.rest.http import ApiError, Ctx, Reply, Spec, not_found

#: GitHub serves file contents up to 1 MB through this endpoint.
MAX_CONTENT_BYTES = 1024 * 1024


def get_content(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="contents")
    git = open_git(repo)
    ref = ctx.query.get("ref") or repo.default_branch
    commit = git.resolve(ref)
    if commit is None:
        raise ApiError(404, f"No commit found for the ref {ref}")
    path = ctx.params["path"].strip("/")
    data = git.read_file(commit, path)
    if data is None:
        raise not_found()
    if len(data) > MAX_CONTENT_BYTES:
        raise ApiError(403, "This API returns blobs up to 1 MB in size.")
    blob = git.blob_sha(commit, path)
    api = f"{ctx.urls.repo_api(repo)}/contents/{path}?ref={ref}"
    html = f"{ctx.urls.repo_web(repo)}/blob/{ref}/{path}"
    git_url = f"{ctx.urls.repo_api(repo)}/git/blobs/{blob}"
    encoded = base64.encodebytes(data).decode("ascii")
    return Reply(
        200,
        {
            "type": "file",
            "encoding": "base64",
            "size": len(data),
            "name": path.rsplit("/", 1)[-1],
            "path": path,
            "content": encoded,
            "sha": blob,
            "url": api,
            "git_url": git_url,
            "html_url": html,
            "download_url": f"{ctx.urls.web}/{repo.full_name}/raw/{ref}/{path}",
            "_links": {"self": api, "git": git_url, "html": html},
        },
    )


ROUTES = [Spec("GET", "/repos/{owner}/{repo}/contents/{path}", get_content)]
