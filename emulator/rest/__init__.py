"""GitHub's REST API, one module per resource; :func:`all_specs` lists every endpoint."""

from __future__ import annotations

from emulator.rest import (
    apps,
    checks,
    comments,
    contents,
    forks,
    issues,
    merge,
    pulls,
    refs,
    repos,
    reviews,
)
from emulator.rest.http import Spec

#: Path parameters that may contain slashes (branch names, ``heads/feature/x``).
PATH_PARAMS = ("ref", "branch", "path")


def all_specs() -> list[Spec]:
    # Order matters where templates overlap: ``commits/{ref}/check-runs`` must be
    # tried before ``commits/{ref}``, whose ref may contain slashes.
    return [
        *apps.ROUTES,
        *checks.ROUTES,
        *merge.ROUTES,
        *reviews.ROUTES,
        *pulls.ROUTES,
        *comments.ROUTES,
        *contents.ROUTES,
        *issues.ROUTES,
        *refs.ROUTES,
        *forks.ROUTES,
        *repos.ROUTES,
    ]


def starlette_path(template: str) -> str:
    for name in PATH_PARAMS:
        template = template.replace("{" + name + "}", "{" + name + ":path}")
    return template
