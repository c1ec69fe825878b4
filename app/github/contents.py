"""One file of a repository at a ref, read through the contents API: no
clone, one small request. Used where repairbot needs the repository's
``.github/repairbot.yml`` before (or without) building a workspace: the
trigger checks, and the check run on pull requests that change it.

The answer is hostile input like any repository content: only a regular
file counts, its size is capped before it is decoded, and it must be UTF-8.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from githubkit.exception import GitHubException

from app.github.client import InstallationGitHub
from app.github.errors import classify, status_of
from app.github.repos import RepoRef


@dataclass(frozen=True)
class FileAt:
    """``text`` is None when the file is absent (``problem`` None) or unusable
    (``problem`` says why, in words for the maintainer)."""

    text: str | None = None
    #: The blob's git object id (equal ids: the same content).
    sha: str | None = None
    problem: str | None = None

    @property
    def exists(self) -> bool:
        return self.sha is not None or self.problem is not None


async def file_at(
    gh: InstallationGitHub, repo: RepoRef, path: str, ref: str, *, max_bytes: int
) -> FileAt:
    """``path`` at ``ref`` (a branch, tag or commit sha); a missing file is
    ``FileAt()``; any other failure is classified for the activity's retry."""
    try:
        response = await gh.arequest(
            "GET", f"/repos/{repo.owner}/{repo.name}/contents/{path}", params={"ref": ref}
        )
    except GitHubException as exc:
        if status_of(exc) == 404:
            return FileAt()
        raise classify(exc, mutation=False) from exc
    return decoded(response.json(), path, max_bytes=max_bytes)


def decoded(data: Any, path: str, *, max_bytes: int) -> FileAt:
    """A contents answer as text: only a regular file, capped, UTF-8."""
    if not isinstance(data, dict) or data.get("type") != "file":
        return FileAt(problem=f"{path} must be a regular file in the repository")
    sha = data.get("sha") if isinstance(data.get("sha"), str) else None
    encoded = data.get("content")
    if not isinstance(encoded, str) or data.get("encoding") != "base64":
        return FileAt(sha=sha, problem=f"{path} could not be read through the contents API")
    if len(encoded) > max_bytes * 2:  # base64 of a file over the cap, with line breaks
        return FileAt(sha=sha, problem=f"{path} is larger than {max_bytes // 1024} KiB")
    try:
        text = base64.b64decode(encoded, validate=False).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return FileAt(sha=sha, problem=f"{path} is not UTF-8 text")
    if len(text.encode()) > max_bytes:
        return FileAt(sha=sha, problem=f"{path} is larger than {max_bytes // 1024} KiB")
    return FileAt(text=text, sha=sha)
