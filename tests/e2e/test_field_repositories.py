"""Repositories shaped like real ones, repaired end to end through the emulator.

The repository (tests/e2e/field_repos.py) has a ``src/`` layout, a suite that
uses ``multiprocessing``, a test that already fails on the base commit, and a
test command that needs a pytest plugin ``setup`` installs from a local wheel
into ``$REPAIRBOT_ENV``, once per run. A command agent applies the real fix,
a wrong one, or the maintainer's config has an ordinary mistake. Outcomes
are read where a maintainer reads them: the issue's status comment and the
check run, from the emulator.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from app.demo.stack import LocalStack
from tests.e2e import field_repos
from tests.e2e.field_repos import (
    FAILS_ON_BASE,
    ISSUE_BODY,
    ISSUE_TITLE,
    PY,
    WRONG,
    agent_command,
    build_plugin_wheel,
    pytest_command,
    write_field_repo,
)
from tests.e2e.scenario import (
    activity_results,
    final_check,
    github_state,
    push_files,
    record_history,
    review,
    scheduled,
    wait_end,
    wait_phase,
)

SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    folder = tmp_path / "wheelhouse"
    build_plugin_wheel(folder)
    return folder


@pytest.fixture
def seed(tmp_path: Path, wheelhouse: Path, request: pytest.FixtureRequest) -> Path:
    """The field repository; ``parametrize("seed", [config options], indirect=True)``."""
    options = getattr(request, "param", None) or {}
    return write_field_repo(tmp_path / "project", wheelhouse, **options)


def start(stack: LocalStack, wheelhouse: Path, agent: list[str]) -> None:
    # The operator's local package index: visible, read-only, in the sandbox.
    stack.start_repairbot(agent_command=tuple(agent), sandbox_read_only=(wheelhouse,))


async def open_issue(stack: LocalStack) -> int:
    people = stack.people
    issue = await stack.gh.create_issue(
        people.owner, stack.repo_name, as_user=people.owner, title=ISSUE_TITLE, body=ISSUE_BODY
    )
    number = int(issue["number"])
    await stack.gh.add_label(
        people.owner, stack.repo_name, number, "repairbot", as_user=people.maintainer
    )
    return number


def setup_commands_run(results: list[dict[str, object]]) -> int:
    """How many setup commands ran in the steps whose results are given."""
    count = 0
    for result in results:
        steps = [result, result.get("reproduction")]
        for step in steps:
            if isinstance(step, dict):
                count += sum(
                    "pip install" in (r["command"].get("shell") or "")  # type: ignore[index]
                    for r in step.get("results", [])  # type: ignore[attr-defined]
                )
    return count


async def test_a_real_suite_gets_its_fix_proposed(stack: LocalStack, wheelhouse: Path) -> None:
    """multiprocessing works in the sandbox, the test failing on the base is not
    blamed on the fix, and the plugin is installed once for the whole run."""
    start(stack, wheelhouse, agent_command())
    started = time.monotonic()
    number = await open_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review", timeout=240)
    print(f"\nlabel -> draft PR: {time.monotonic() - started:.1f}s")  # docs/benchmarks.md

    state = await github_state(stack, number)
    [pull] = state["pulls"]
    assert pull["draft"] is True
    [comment] = state["status_comments"]
    body = comment["body"]
    # The reproduction's own test and the one that needs a live service.
    assert "2 test(s) already fail there" in body and FAILS_ON_BASE in body
    assert (
        f"Still failing, as on the base commit (not caused by the fix): `{FAILS_ON_BASE}`" in body
    )
    assert "Fixed by it: `tests.test_median::test_even_length`" in body
    assert "/workspaces/" not in body and "ws-" not in body
    assert status["tests_on_base"] in body
    assert FAILS_ON_BASE in pull["body"]
    # One setup for the run: the base's; the candidate's steps reused it.
    [base] = activity_results(stack, number, "commands.run_reproduction")
    assert base["baseline"]["failing"] == [FAILS_ON_BASE, "tests.test_median::test_even_length"]
    assert setup_commands_run([base]) == 1
    verified = activity_results(stack, number, "commands.verify_candidate")
    assert setup_commands_run(verified) == 0
    assert all(v["reproduction"]["reused_env"] for v in verified)


async def test_after_the_base_moves_the_fix_is_judged_against_the_new_base(
    stack: LocalStack, wheelhouse: Path
) -> None:
    """The base moves after the proposal (a fast-forward); the approval makes the
    run rebuild the fix on the new tip. The tests are run on that tip first, so
    the test that fails there as before is not blamed on the fix: it merges."""
    start(stack, wheelhouse, agent_command())
    number = await open_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review", timeout=240)
    moved = await push_files(stack, "main", {"CHANGELOG.md": "- unrelated change\n"})
    await review(stack, status["pull_number"], "APPROVE", body="Looks right.")
    run = await wait_end(stack, number, timeout=240)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "merged", run.result
    [on_moved] = [
        r
        for r in activity_results(stack, number, "commands.run_reproduction")
        if r["baseline"] is not None and r["baseline"]["base_sha"] == moved
    ]
    assert FAILS_ON_BASE in on_moved["baseline"]["failing"]
    # Another commit, the same dependency files: the environment is reused.
    assert on_moved["reused_env"] is True and setup_commands_run([on_moved]) == 0
    reverified = activity_results(stack, number, "commands.verify_candidate")[-1]
    assert reverified["verdict"] == "verified"
    assert FAILS_ON_BASE in reverified["comparison"]["still_failing"]


@SQLITE_ONLY
async def test_a_fix_that_breaks_a_passing_test_is_not_proposed(
    stack: LocalStack, wheelhouse: Path
) -> None:
    start(stack, wheelhouse, agent_command(new=WRONG))
    number = await open_issue(stack)
    run = await wait_end(stack, number, timeout=240)
    assert run.result["outcome"] == "budget-exhausted"
    record_history(stack, number, "repair_v2_field_regression_budget_exhausted")
    state = await github_state(stack, number)
    assert state["pulls"] == []
    [comment] = state["status_comments"]
    body = comment["body"]
    assert "pass on the base commit fail with the patch applied" in body
    assert "tests.test_median::test_odd_length" in body
    # The test that fails on the base is never the reason given.
    assert f"`{FAILS_ON_BASE}`" not in body.split("the last one said")[1]


BROKEN = {
    "plugin-not-installed": (
        {"setup": False},
        "broken-reproduction",
        "pytest was called wrongly",
    ),
    "missing-interpreter": (
        {"reproduce": "python9.99 -m pytest tests/test_median.py"},
        "broken-reproduction",
        "could not be found",
    ),
    "test-selects-nothing": (
        {"test": pytest_command("--field-seed=3", "-k", "no_such_test", "tests")},
        "invalid-config",
        "pytest collected no tests",
    ),
}


@SQLITE_ONLY
@pytest.mark.parametrize(
    ("seed", "outcome", "says"),
    [pytest.param(*case, id=name) for name, case in BROKEN.items()],
    indirect=["seed"],
)
async def test_a_config_mistake_is_reported_before_any_agent_attempt(
    stack: LocalStack, wheelhouse: Path, outcome: str, says: str
) -> None:
    start(stack, wheelhouse, agent_command())
    number = await open_issue(stack)
    run = await wait_end(stack, number, timeout=120)
    assert run.result["outcome"] == outcome, run.result
    record_history(stack, number, f"repair_v2_field_{outcome.replace('-', '_')}")
    assert scheduled(stack, number, "agent.propose_fix") == []
    detail = run.result["detail"]
    assert says in detail and "No agent attempt was made" in detail
    state = await github_state(stack, number)
    [comment] = state["status_comments"]
    body = comment["body"]
    assert detail in body  # the run detail and the comment say the same
    assert ".github/repairbot.yml" in body
    assert "passes on the base commit" not in body  # no contradictory headline
    check = await final_check(stack, run.result["base_sha"])
    assert (
        check["output"]["summary"] == body.split("\n<!--")[0]
        or detail in check["output"]["summary"]
    )
    assert state["pulls"] == []


@SQLITE_ONLY
@pytest.mark.parametrize("seed", [{"setup_once": False}], indirect=True)
async def test_without_setup_once_setup_runs_for_every_step(
    stack: LocalStack, wheelhouse: Path
) -> None:
    """The comparison point of docs/benchmarks.md: the same run, setup every step."""
    start(stack, wheelhouse, agent_command())
    started = time.monotonic()
    number = await open_issue(stack)
    await wait_phase(stack, number, "awaiting-review", timeout=240)
    print(f"\nlabel -> draft PR (setup every step): {time.monotonic() - started:.1f}s")
    verified = activity_results(stack, number, "commands.verify_candidate")
    assert setup_commands_run(verified) == 1


@SQLITE_ONLY
@pytest.mark.parametrize("seed", [{"in_checkout": True}], indirect=True)
async def test_a_setup_that_installs_into_the_checkout_runs_once(
    stack: LocalStack, wheelhouse: Path
) -> None:
    """Setup writes ``.deps/`` into the checkout, with a link naming the checkout's
    absolute path: the candidate gets its own copy, relinked, and setup runs once."""
    start(stack, wheelhouse, agent_command())
    started = time.monotonic()
    number = await open_issue(stack)
    await wait_phase(stack, number, "awaiting-review", timeout=240)
    print(f"\nlabel -> draft PR (setup into the checkout): {time.monotonic() - started:.1f}s")
    [base] = activity_results(stack, number, "commands.run_reproduction")
    assert setup_commands_run([base]) == 1
    verified = activity_results(stack, number, "commands.verify_candidate")
    assert setup_commands_run(verified) == 0
    assert all(v["reproduction"]["reused_env"] for v in verified)
    [pull] = (await github_state(stack, number))["pulls"]
    assert pull["draft"] is True


def test_the_field_repository_needs_what_it_claims(tmp_path: Path, wheelhouse: Path) -> None:
    """Its config installs a plugin its test command needs (a fast check of the fixture)."""
    repo = write_field_repo(tmp_path / "r", wheelhouse)
    text = (repo / ".github" / "repairbot.yml").read_text()
    assert "--field-seed=3" in text and field_repos.PLUGIN in text and PY in text
