"""Git's answer to a suspended installation is a bare 401/403 (the API's says
"This installation has been suspended"): a git activity that failed asks
GitHub, with the App's JWT, whether the installation is suspended, and if so
fails as :class:`InstallationSuspended`, so its run waits for the unsuspend
(app/workflows/calls.py) instead of retrying into an error."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from app.engine import ActivityContext, ActivityFailure
from app.github.client import GitHubClientFactory
from app.github.errors import SUSPENDED, InstallationSuspended

log = logging.getLogger(__name__)


async def suspended(factory: GitHubClientFactory, installation_id: int) -> bool:
    """Whether GitHub says the installation is suspended; False when it cannot say."""
    try:
        return await factory.installation_suspended(installation_id)
    except ActivityFailure as failure:
        log.warning(
            "cannot tell whether installation %s is suspended: %s", installation_id, failure
        )
        return False


I = TypeVar("I")  # noqa: E741 (the activity's input)
R = TypeVar("R")
S = TypeVar("S")  # the object an activity method is of


async def _as_suspension(
    factory: GitHubClientFactory, failure: ActivityFailure, raw: object
) -> None:
    """Raise the suspension ``failure`` is, if the installation is suspended."""
    installation = (
        raw.get("installation_id")
        if isinstance(raw, dict)
        else getattr(raw, "installation_id", None)
    )
    if not isinstance(installation, int) or isinstance(installation, bool):
        return
    if await suspended(factory, installation):
        raise InstallationSuspended(f"{failure.message} ({SUSPENDED})") from failure


def suspension_checked(
    factory_of: Callable[[S], GitHubClientFactory],
) -> Callable[
    [Callable[[S, ActivityContext, I], Awaitable[R]]],
    Callable[[S, ActivityContext, I], Awaitable[R]],
]:
    """An activity method (whose input names ``installation_id``) whose
    failures read as the suspension when the installation is suspended;
    ``factory_of(self)``: the GitHub client factory its object holds."""

    def wrap(
        fn: Callable[[S, ActivityContext, I], Awaitable[R]],
    ) -> Callable[[S, ActivityContext, I], Awaitable[R]]:
        @functools.wraps(fn)
        async def checked(self: S, actx: ActivityContext, raw: I) -> R:
            try:
                return await fn(self, actx, raw)
            except InstallationSuspended:
                raise
            except ActivityFailure as failure:
                await _as_suspension(factory_of(self), failure, raw)
                raise

        return checked

    return wrap
