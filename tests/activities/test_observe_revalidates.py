"""The drift check's reads are the ones revalidated with stored ETags
(app/github/conditional.py): an unchanged answer costs the rate limit nothing."""

from __future__ import annotations

from typing import Any, cast

import pytest

from activities.github import GitHubAccess, GitHubActivities
from app.config import Settings
from app.engine import ActivityContext
from app.github import conditional
from tests.activities.support import body


class _Asked(Exception):
    """Raised by the fake factory: whether the reads would be revalidated."""


class _Factory:
    def for_installation(self, installation_id: int, *, repository: str | None = None) -> Any:
        raise _Asked(conditional._REVALIDATING.get())


class _Context:
    """Nothing of the context is read before the first GitHub call."""


async def test_the_drift_check_reads_inside_revalidating() -> None:
    raw = {
        "installation_id": 7,
        "repo": "octo/demo",
        "issue_number": 1,
        "op_run": "r",
        "op_step": "s",
    }
    access = GitHubAccess(factory=cast(Any, _Factory()), git_url="http://git.test")
    observe = body(GitHubActivities(access, cast(Any, None), Settings()), "github.observe")
    with pytest.raises(_Asked) as asked:
        await observe.fn(cast(ActivityContext, _Context()), raw)
    assert asked.value.args == (True,)
    assert conditional._REVALIDATING.get() is False  # only inside the check
