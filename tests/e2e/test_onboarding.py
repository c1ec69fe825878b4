"""Onboarding end to end: the App installed on a repository without
``.github/repairbot.yml`` proposes one in a pull request (with the commands it
detected) and creates the trigger label; a redelivery proposes nothing twice;
a repository that has a config is left alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.contracts.onboarding import onboarding_workflow_id
from app.demo.stack import LocalStack
from app.onboarding.proposal import ONBOARDING_BRANCH
from tests.e2e.scenario import branch_sha, file_on_branch, push_files

pytestmark = pytest.mark.slow

PYPROJECT = """[project]
name = "slugify"
version = "0.1"
[project.optional-dependencies]
test = ["pytest"]
[tool.pytest.ini_options]
testpaths = ["tests"]
"""


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    folder = tmp_path / "seed"
    (folder / "slugify").mkdir(parents=True)
    (folder / "tests").mkdir()
    (folder / "slugify" / "__init__.py").write_text("def slugify(text):\n    return text\n")
    (folder / "tests" / "test_slugify.py").write_text("def test_nothing():\n    pass\n")
    (folder / "pyproject.toml").write_text(PYPROJECT)
    (folder / "README.md").write_text("# slugify\n")
    return folder


async def _repository_id(stack: LocalStack, name: str) -> int:
    repo = await stack.gh.rest(
        "GET", f"/repos/{stack.people.owner}/{name}", as_user=stack.people.owner
    )
    return int(repo["id"])


async def _pulls(stack: LocalStack, name: str) -> list[dict[str, object]]:
    pulls: list[dict[str, object]] = await stack.gh.rest(
        "GET", f"/repos/{stack.people.owner}/{name}/pulls?state=all", as_user=stack.people.owner
    )
    return pulls


async def _onboard_by_redelivery(stack: LocalStack) -> dict[str, object]:
    """GitHub redelivers the installation event the App missed while it was
    not listening yet (the stack installs the App before repairbot starts)."""
    created = await stack.gh.deliveries.list(event="installation", action="created")
    assert created, "the emulator sent no installation.created"
    attempt = await stack.gh.deliveries.redeliver(created[0]["id"])
    await stack.gh.deliveries.wait()
    return attempt


async def test_a_repository_without_config_gets_one_onboarding_pull_request(
    stack: LocalStack,
) -> None:
    stack.start_repairbot(onboarding=True)
    assert stack.runtime is not None
    await _onboard_by_redelivery(stack)
    repo_id = await _repository_id(stack, stack.repo_name)
    run = await stack.runtime.wait_for(onboarding_workflow_id(repo_id), timeout=60)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "proposed"

    pulls = await _pulls(stack, stack.repo_name)
    assert len(pulls) == 1
    pull = pulls[0]
    assert pull["head"]["ref"] == ONBOARDING_BRANCH and pull["draft"] is False  # type: ignore[index]
    assert pull["state"] == "open" and pull["user"]["login"].endswith("[bot]")  # type: ignore[index]
    body = str(pull["body"])
    assert "Nothing runs until this file exists" in body and "pytest" in body
    config = file_on_branch(stack, ONBOARDING_BRANCH, ".github/repairbot.yml")
    assert "python -m pytest -q" in config and ".[test]" in config
    assert "trigger_label: repairbot" in config
    labels = await stack.gh.rest(
        "GET", f"/repos/{stack.people.owner}/{stack.repo_name}/labels", as_user=stack.people.owner
    )
    assert "repairbot" in [label["name"] for label in labels]

    # The same event again (GitHub redelivers; an operator clicks "redeliver"):
    # the existing proposal is found by its marker, nothing is proposed twice.
    await _onboard_by_redelivery(stack)
    await stack.gh.deliveries.wait()
    again = await stack.runtime.wait_for(onboarding_workflow_id(repo_id), timeout=60)
    assert again.status == "completed"
    assert len(await _pulls(stack, stack.repo_name)) == 1


async def test_a_configured_repository_is_left_alone(stack: LocalStack) -> None:
    await push_files(stack, "main", {".github/repairbot.yml": "test: python -m pytest -q\n"})
    stack.start_repairbot(onboarding=True)
    assert stack.runtime is not None
    await _onboard_by_redelivery(stack)
    repo_id = await _repository_id(stack, stack.repo_name)
    run = await stack.runtime.wait_for(onboarding_workflow_id(repo_id), timeout=60)
    assert run.status == "completed" and run.result["outcome"] == "configured"
    assert await _pulls(stack, stack.repo_name) == []
    assert branch_sha(stack, ONBOARDING_BRANCH) is None
