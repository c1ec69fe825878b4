"""Run a test's subprocesses under each child watcher a process of ours may
have: asyncio's default (a thread per child) and the worker's and web
process's :class:`~app.main.children.PidfdWatcher` (app/main/children.py)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator

import pytest

from app.main import children

#: Python 3.12 watches children through pidfds itself (children.py).
WATCHERS = ["asyncio's default", "pidfd"] if sys.version_info < (3, 12) else ["asyncio's default"]


@pytest.fixture(params=WATCHERS)
def child_watcher(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "pidfd":
        previous = asyncio.get_child_watcher()
        asyncio.set_child_watcher(children.PidfdWatcher())
        try:
            yield request.param
        finally:
            asyncio.set_child_watcher(previous)
    else:
        yield request.param
