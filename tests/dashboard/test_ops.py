"""Metrics (process metrics merged across real processes, record metrics
from the database, GitHub calls through the metered transport), JSON logs
with the work's context, and ``runs watch``."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import httpx
from githubkit import GitHub, TokenAuthStrategy
from prometheus_client import REGISTRY

from app.logs import JsonLines, log_context
from app.operations.api_tokens import create_token
from app.operations.metrics import MeteredTransport, route_of
from app.operations.watch import watch
from tests.dashboard.conftest import GITHUB, World
from tests.waiting import wait_until


def test_route_labels_are_bounded() -> None:
    assert route_of("/repos/octo/widgets/pulls/12/merge") == "/repos/{owner}/{repo}/pulls/{n}/merge"
    assert (
        route_of("/repos/o/r/git/refs/heads/repairbot/issue-3")
        == "/repos/{owner}/{repo}/git/refs/{ref}"
    )
    assert (
        route_of("/app/installations/5001/access_tokens") == "/app/installations/{id}/access_tokens"
    )
    assert route_of(f"/repos/o/r/commits/{'a' * 40}/check-runs") == (
        "/repos/{owner}/{repo}/commits/{sha}/check-runs"
    )


def test_process_metrics_are_merged_across_processes(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    count = (
        "from app.operations.metrics import instruments\n"
        "m = instruments()\n"
        "m.github_calls.labels('GET', '/repos/{owner}/{repo}', '200').inc()\n"
        "m.intake_seconds.labels('202').observe(0.01)\n"
    )
    for _ in range(3):
        subprocess.run([sys.executable, "-c", count], env=env, check=True)
    render = (
        "from prometheus_client import generate_latest\n"
        "from app.operations.metrics import process_registry\n"
        "print(generate_latest(process_registry()).decode())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", render], env=env, check=True, capture_output=True, text=True
    ).stdout
    calls = 'repairbot_github_api_calls_total{method="GET",route="/repos/{owner}/{repo}"'
    assert calls + ',status="200"} 3.0' in out
    assert 'repairbot_intake_seconds_count{result="202"} 3.0' in out


async def test_github_calls_are_counted_with_the_rate_limit(world: World) -> None:
    metered = MeteredTransport(httpx.ASGITransport(app=world.emulator.asgi()))
    before = REGISTRY.get_sample_value(
        "repairbot_github_api_calls_total",
        {"method": "GET", "route": "/repos/{owner}/{repo}", "status": "200"},
    )
    # No HTTP cache: githubkit's is process-wide, and a copy another test
    # stored would be revalidated (304) instead of fetched (the 200 counted here).
    async with GitHub(
        TokenAuthStrategy(world.gh.tokens["maya"]),
        base_url=GITHUB,
        async_transport=metered,
        http_cache=False,
    ) as gh:
        await gh.rest.repos.async_get("octo", "widgets")
    after = REGISTRY.get_sample_value(
        "repairbot_github_api_calls_total",
        {"method": "GET", "route": "/repos/{owner}/{repo}", "status": "200"},
    )
    assert (after or 0) - (before or 0) == 1
    remaining = REGISTRY.get_sample_value(
        "repairbot_github_rate_limit_remaining", {"resource": "core"}
    )
    assert remaining is not None and 0 < remaining < 5000


async def test_record_metrics_come_from_the_database(world: World) -> None:
    token = create_token(world.runtime.store, "scraper", {"metrics"})
    await world.runtime.cancel("repair:octo/secret#1", "enough")
    await world.runtime.wait_for(world.runs["secret#1"], statuses=("cancelled",))
    async with world.browser() as client:
        text = (await client.get("/metrics", headers={"authorization": f"Bearer {token}"})).text
    assert 'repairbot_runs{status="running"} 2.0' in text
    assert 'repairbot_run_outcomes_total{outcome="cancelled",status="cancelled"} 1.0' in text
    assert (
        'repairbot_activity_attempts_total{activity="agent.propose_fix",outcome="completed"} 3.0'
        in text
    )
    assert 'repairbot_agent_tokens_total{direction="input"} 3600.0' in text
    assert 'repairbot_phase_duration_seconds_count{phase="reproducing"} 1.0' in text
    assert "repairbot_outbox_depth" in text and "repairbot_stale_writes_rejected_total 0.0" in text


async def test_logs_are_json_lines_with_the_work_context(world: World) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLines())
    root = logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        with log_context(delivery_id="d-42"):
            logging.getLogger("tests").info("received")
        started = await world.runtime.start_workflow(
            "repair", "repair:octo/widgets#77", {"repo": "octo/widgets", "issue_number": 77}
        )
        for _ in range(200):
            if "reproducing in" in stream.getvalue().split("received", 1)[1]:
                break
            await asyncio.sleep(0.05)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    received = next(line for line in lines if line["msg"] == "received")
    assert received["delivery_id"] == "d-42" and received["level"] == "info"
    activity = next(line for line in lines if line["msg"].startswith("reproducing in"))
    assert activity["activity"] == "commands.run_reproduction"
    assert activity["attempt"] == 1
    assert activity["run_id"] == started.run_id
    assert "delivery_id" not in activity  # nothing lingers from other work


async def test_runs_watch_follows_a_run_to_its_end(world: World) -> None:
    out = io.StringIO()
    watching = asyncio.create_task(
        asyncio.to_thread(
            watch, world.runtime, world.runs["widgets#2"], interval=0.05, out=out, timeout=30
        )
    )
    await wait_until("the watch showing the run", out.getvalue)
    await world.runtime.cancel("repair:octo/widgets#2", "not needed")
    code = await asyncio.wait_for(watching, 40)
    text = out.getvalue()
    assert code == 1
    assert "status running, phase awaiting-review" in text
    assert "cancel_requested" in text
    assert "attempt 1 of propose-1 on" in text
    assert text.rstrip().endswith("run cancelled: cancelled")


def test_tokens_cli_prints_the_token_once(tmp_path: Path) -> None:
    env = {**os.environ, "REPAIRBOT_DATA_DIR": str(tmp_path)}
    subprocess.run(
        [sys.executable, "-m", "app.main.cli", "migrate"], env=env, check=True, capture_output=True
    )
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.main.cli",
            "tokens",
            "create",
            "ci",
            "--scope",
            "read",
            "--scope",
            "act",
        ],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    token = made.stdout.strip()
    assert token.startswith("rbt_") and "shown only now" in made.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "app.main.cli", "tokens", "list"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "ci" in listed and "act read" in listed and token not in listed
    assert quote(token) == token  # safe in a header as is
