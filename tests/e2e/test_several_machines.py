"""Several machines: one ``repairbot web`` process and two ``repairbot worker``
processes with separate data directories, sharing only PostgreSQL, Redis (arq)
and the emulated GitHub, as separate machines would.

Machine A starts every run and stores evidence in the database; it is
SIGKILLed mid-run (as its first agent call returns); machine B, started only
then, finishes every run, reading the evidence A wrote. Every run ends merged
with exactly one branch, one pull request and one status comment, and its
evidence, written on either machine, is read back through the web API.
"""

from __future__ import annotations

import asyncio
import hashlib
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.contracts.ids import repair_workflow_id
from app.demo.fleet import Fleet, wait_healthy
from app.demo.project import FIXED_LINE, ISSUE_BODY, ISSUE_TITLE, fix_agent_command, write_project
from app.demo.stack import LocalStack
from app.engine._db import make_engine
from app.engine._runtime import SETTLED, Runtime
from app.engine._store import Store
from app.main.catalog import build_registry
from app.operations.api_tokens import create_token
from tests.e2e.scenario import file_on_branch

REPOS = ("slugify", "slugify-two", "slugify-three")
KILL_POINT = "activity.before_complete:agent.propose_fix"


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    return write_project(tmp_path / "project")


def completed_by(runtime: Runtime, run_id: str) -> dict[str, set[str]]:
    """Activity name -> the machines (worker id prefixes) that completed it."""
    out: dict[str, set[str]] = {}
    for attempt in runtime.store.activity_attempts(run_id):
        if attempt["outcome"] == "completed":
            machine = str(attempt["worker_id"]).split("/", 1)[0]
            out.setdefault(attempt["activity"], set()).add(machine)
    return out


async def wait_until(what: str, check: Any, fleet: Fleet, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s\n{fleet.logs()}")
        await asyncio.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    "db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
async def test_runs_move_between_machines_and_survive_one_killed(
    stack: LocalStack, seed: Path, redis_url: str, db_url: str, tmp_path: Path
) -> None:
    assert stack.settings is not None
    for name in REPOS[1:]:
        await stack.add_repo(name, seed)
    settings = stack.settings.with_overrides(
        redis_url=redis_url,
        # The agent thinks a while, so every run is under way when A dies.
        agent_command=tuple(fix_agent_command(sleep=2.0)),
        relay_grace=0.2,
        reconcile_interval=0.1,
        worker_silence=2.0,
    )
    fleet = Fleet(tmp_path / "machines", settings)
    fleet.root.mkdir()
    app_url = stack.app_url
    web = fleet.web(stack.hand_app_port_over()).start()
    # Machine A dies (SIGKILL, by a named fault point) the moment its first
    # agent call returns, before the result is recorded: mid-run, with the
    # reproduction log it wrote already in the database.
    machine_a = fleet.worker("machine-a", fault_point=KILL_POINT).start()
    reader = Runtime(make_engine(db_url), build_registry())
    try:
        wait_healthy(f"{app_url}/healthz", web)
        people = stack.people
        numbers: dict[str, int] = {}
        for name in REPOS:
            issue = await stack.gh.create_issue(
                people.owner, name, as_user=people.owner, title=ISSUE_TITLE, body=ISSUE_BODY
            )
            numbers[name] = int(issue["number"])
            await stack.gh.add_label(
                people.owner, name, numbers[name], "repairbot", as_user=people.maintainer
            )
        ids = {
            name: repair_workflow_id(stack.gh.repo_id(f"{people.owner}/{name}"), n)
            for name, n in numbers.items()
        }
        await wait_until("machine A was killed", lambda: not machine_a.alive(), fleet)
        runs_at_kill = [reader.store.find_run(wid) for wid in ids.values()]
        assert all(run is not None and run.status not in SETTLED for run in runs_at_kill)
        machine_b = fleet.worker("machine-b").start()

        approved: set[str] = set()

        def all_settled() -> bool:
            runs = [reader.store.find_run(wid) for wid in ids.values()]
            return all(run is not None and run.status in SETTLED for run in runs)

        deadline = time.monotonic() + 150
        while not all_settled():
            assert time.monotonic() < deadline, f"runs did not finish\n{fleet.logs()}"
            for name, wid in ids.items():
                run = reader.store.find_run(wid)
                if name in approved or run is None or run.status in SETTLED:
                    continue
                if await stack.approve_when_awaiting_review(reader, run.run_id, name):
                    approved.add(name)
            await asyncio.sleep(0.1)

        assert machine_a.process is not None
        assert machine_a.process.returncode == -signal.SIGKILL
        assert machine_b.alive(), machine_b.log()[-3000:]
        done: dict[str, dict[str, set[str]]] = {}
        # Evidence is an operator's read: the API answers an operator token.
        token = create_token(Store(make_engine(db_url)), "fleet-check", {"read"})
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=app_url, headers=headers) as api:
            for name, wid in ids.items():
                run = reader.store.find_run(wid)
                assert run is not None
                assert run.status == "completed", (name, run.error, fleet.logs())
                assert run.result["outcome"] == "merged"
                done[name] = completed_by(reader, run.run_id)
                assert "machine-b" in set().union(*done[name].values()), (name, done[name])
                await check_github(stack, name, numbers[name])
                await check_evidence(api, run.result["evidence"])
        # The run A died in: its bug reproduced on A, its fix proposed on B from
        # the reproduction log A had stored (a read across machines).
        crossed = [
            name
            for name, by in done.items()
            # (B also reproduces once more on the merge commit, after the merge.)
            if "machine-a" in by["commands.run_reproduction"]
            and by["agent.propose_fix"] == {"machine-b"}
        ]
        assert crossed, done
    finally:
        fleet.stop()
        reader.engine.dispose()


async def check_github(stack: LocalStack, repo: str, number: int) -> None:
    """One merged pull request (its branch deleted after the merge), one status comment."""
    owner, who = stack.people.owner, stack.people.owner
    pulls = await stack.gh.rest("GET", f"/repos/{owner}/{repo}/pulls?state=all", as_user=who)
    branches = await stack.gh.rest("GET", f"/repos/{owner}/{repo}/branches", as_user=who)
    comments = await stack.gh.rest(
        "GET", f"/repos/{owner}/{repo}/issues/{number}/comments", as_user=who
    )
    assert [p["merged_at"] is not None for p in pulls] == [True], pulls
    # The run's one branch was deleted after its pull request merged.
    assert sorted(b["name"] for b in branches) == ["main"]
    status = [c for c in comments if "repairbot:op=" in c["body"] and "status" in c["body"]]
    assert len(status) == 1, comments
    if repo == stack.repo_name:
        assert FIXED_LINE in file_on_branch(stack, "main", "slugify/__init__.py")


async def check_evidence(api: httpx.AsyncClient, evidence: list[dict[str, Any]]) -> None:
    """Every artifact the run names, read through the web process's API."""
    labels = [item["label"] for item in evidence]
    assert any(label.startswith("reproduction") for label in labels), labels
    assert any(label.startswith("patch") for label in labels), labels
    for item in evidence:
        ref = item["ref"]
        response = await api.get(f"/api/evidence/{ref['sha256']}")
        assert response.status_code == 200, (item, response.text)
        assert hashlib.sha256(response.content).hexdigest() == ref["sha256"]
        assert len(response.content) == ref["size"]
