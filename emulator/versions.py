"""REST API versions: the ``X-GitHub-Api-Version`` request header.

GitHub serves each supported calendar version and names the one it used in
``X-GitHub-Api-Version-Selected``; a request without the header gets
2022-11-28; an unknown version is refused with 400 before anything happens.
Handlers render the 2022-11-28 shapes; :func:`adapt` applies the breaking
changes of later versions to an answer, the way GitHub documents them
(docs.github.com, "Breaking changes", version 2026-03-10). Only the changes
that touch what the emulator serves are modelled (see docs/architecture.md).
"""

from __future__ import annotations

from typing import Any

DEFAULT = "2022-11-28"
V2026_03_10 = "2026-03-10"
SUPPORTED = (DEFAULT, V2026_03_10)

# 2026-03-10: fields removed from pull request, issue and repository objects.
_PULL_REMOVED = ("merge_commit_sha", "assignee")
_ISSUE_REMOVED = ("assignee",)
_REPO_REMOVED = ("has_downloads", "use_squash_pr_title_as_default")


class UnsupportedVersion(ValueError):
    def __init__(self, version: str) -> None:
        super().__init__(version)
        self.version = version

    @property
    def message(self) -> str:
        return (
            f"'{self.version}' is not a supported version for this endpoint; "
            f"supported versions: {', '.join(SUPPORTED)}"
        )


def select(header: str | None) -> str:
    """The version to answer with; raises :class:`UnsupportedVersion`."""
    if header is None or not header.strip():
        return DEFAULT
    version = header.strip()
    if version not in SUPPORTED:
        raise UnsupportedVersion(version)
    return version


def adapt(body: Any, version: str, route: str) -> Any:
    """``body`` (a 2022-11-28 answer to ``route``) as ``version`` answers it."""
    if version == DEFAULT or body is None:
        return body
    if route == "GET /rate_limit" and isinstance(body, dict):
        return {k: v for k, v in body.items() if k != "rate"}
    return _strip(body)


def _strip(value: Any) -> Any:
    if isinstance(value, list):
        return [_strip(item) for item in value]
    if not isinstance(value, dict):
        return value
    removed: tuple[str, ...] = ()
    if "head" in value and "base" in value and "number" in value:
        removed = _PULL_REMOVED
    elif "number" in value and "labels" in value and "state" in value:
        removed = _ISSUE_REMOVED
    elif "full_name" in value and "owner" in value:
        removed = _REPO_REMOVED
    return {k: _strip(v) for k, v in value.items() if k not in removed}
