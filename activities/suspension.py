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


FactoryOf = Callable[[ActivityContext], GitHubClientFactory]
I = TypeVar("I")  # noqa: E741 (the activity's input)
R = TypeVar("R")


def suspension_checked(
    factory_of: FactoryOf,
) -> Callable[
    [Callable[[ActivityContext, I], Awaitable[R]]], Callable[[ActivityContext, I], Awaitable[R]]
]:
    """An activity (whose input names ``installation_id``) whose failures read
    as the suspension when the installation is suspended."""

    def wrap(
        fn: Callable[[ActivityContext, I], Awaitable[R]],
    ) -> Callable[[ActivityContext, I], Awaitable[R]]:
        @functools.wraps(fn)
        async def checked(actx: ActivityContext, raw: I) -> R:
            try:
                return await fn(actx, raw)
            except InstallationSuspended:
                raise
            except ActivityFailure as failure:
                installation = (
                    raw.get("installation_id")
                    if isinstance(raw, dict)
                    else getattr(raw, "installation_id", None)
                )
                if not isinstance(installation, int) or isinstance(installation, bool):
                    raise
                if not await suspended(factory_of(actx), installation):
                    raise
                raise InstallationSuspended(f"{failure.message} ({SUSPENDED})") from failure

        return checked

    return wrap
