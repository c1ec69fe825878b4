"""A pull request that changes ``.github/repairbot.yml`` gets a check run with
the file's problems (line and field); one that leaves the file alone gets none.
Through the emulator's real webhooks and contents API."""

from __future__ import annotations

from typing import Any

import pytest

from app.contracts.config_check import config_check_workflow_id
from app.demo.stack import LocalStack
from app.workflows.config_check import CHECK_NAME
from tests.e2e.scenario import check_runs, push_files

pytestmark = pytest.mark.slow


async def _open_pull(stack: LocalStack, branch: str, files: dict[str, str | None]) -> str:
    sha = await push_files(stack, branch, files)
    await stack.gh.rest(
        "POST",
        f"/repos/{stack.repo}/pulls",
        as_user=stack.people.maintainer,
        body={"title": f"Change {branch}", "head": branch, "base": "main", "body": ""},
    )
    return sha


async def _checked(stack: LocalStack, sha: str) -> Any:
    assert stack.runtime is not None
    await stack.gh.deliveries.wait()
    repo_id = stack.gh.repo_id(stack.repo)
    return await stack.runtime.wait_for(config_check_workflow_id(repo_id, sha), timeout=60)


async def test_a_broken_config_change_fails_its_check_and_others_get_none(
    stack: LocalStack,
) -> None:
    stack.start_repairbot()
    broken = await _open_pull(
        stack,
        "config",
        {".github/repairbot.yml": "test: make test\nbudgets: {repair_atempts: 2}\n"},
    )
    run = await _checked(stack, broken)
    assert run.status == "completed" and run.result["outcome"] == "failure"
    [check] = [c for c in await check_runs(stack, broken) if c["name"] == CHECK_NAME]
    assert check["conclusion"] == "failure"
    assert ".github/repairbot.yml:2: budgets.repair_atempts" in check["output"]["summary"]

    fixed = await push_files(
        stack,
        "config",
        {".github/repairbot.yml": "test: make test\nbudgets: {repair_attempts: 2}\n"},
    )
    run = await _checked(stack, fixed)
    assert run.result["outcome"] == "success"
    [check] = [c for c in await check_runs(stack, fixed) if c["name"] == CHECK_NAME]
    assert check["conclusion"] == "success"

    other = await _open_pull(stack, "docs", {"README.md": "# slugify, documented\n"})
    run = await _checked(stack, other)
    assert run.result["outcome"] == "unchanged"
    assert [c for c in await check_runs(stack, other) if c["name"] == CHECK_NAME] == []
