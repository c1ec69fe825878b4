"""A git activity's failure is read as the installation's suspension only when
GitHub says the installation is suspended (activities/suspension.py)."""

from __future__ import annotations

import functools
from typing import Any, cast

import pytest

from activities.suspension import suspension_checked
from app.engine import ActivityContext, PermanentError, TransientError
from app.github.client import GitHubClientFactory
from app.github.errors import InstallationSuspended


class _Factory:
    """Answers ``installation_suspended`` as told (or fails to answer)."""

    def __init__(self, answer: bool | Exception) -> None:
        self.answer = answer
        self.asked: list[int] = []

    async def installation_suspended(self, installation_id: int) -> bool:
        self.asked.append(installation_id)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class _Activities:
    """Holds its factory, as the activity classes do."""

    def __init__(self, factory: _Factory) -> None:
        self.factory = cast(GitHubClientFactory, factory)


def _factory_of(activities: _Activities) -> GitHubClientFactory:
    return activities.factory


def _git_activity(factory: _Factory) -> Any:
    @suspension_checked(_factory_of)
    async def push(self: _Activities, actx: ActivityContext, raw: Any) -> Any:
        raise TransientError("git push failed: HTTP 401")

    return functools.partial(push, _Activities(factory))


async def test_the_failure_of_a_suspended_installation_is_the_suspension() -> None:
    factory = _Factory(True)
    push = _git_activity(factory)
    with pytest.raises(InstallationSuspended, match="HTTP 401"):
        await push(cast(ActivityContext, None), {"installation_id": 7})
    assert factory.asked == [7]


@pytest.mark.parametrize(
    "answer", [False, TransientError("GitHub answered 502")], ids=["active", "unknown"]
)
async def test_otherwise_the_failure_stays_what_it_was(answer: bool | Exception) -> None:
    push = _git_activity(_Factory(answer))
    with pytest.raises(TransientError, match="HTTP 401") as raised:
        await push(cast(ActivityContext, None), {"installation_id": 7})
    assert not isinstance(raised.value, InstallationSuspended)


async def test_an_input_without_an_installation_is_not_asked_about() -> None:
    factory = _Factory(True)

    @suspension_checked(_factory_of)
    async def refused(self: _Activities, actx: ActivityContext, raw: Any) -> Any:
        raise PermanentError("no")

    with pytest.raises(PermanentError, match="no"):
        await refused(_Activities(factory), cast(ActivityContext, None), {"repo": "o/r"})
    assert factory.asked == []
