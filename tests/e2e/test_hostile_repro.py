"""A hostile repro block through the whole repair, over real webhooks (issue 8).

The issue's reproduction tries to read the worker's secrets (its environment,
the key file, the database, the data directory, sibling workspaces) and to
reach the emulator's loopback port, then runs the real failing test. The run
goes on as usual (reproduce, repair, verify, draft PR) and no secret appears
anywhere: history, evidence, logs, the JSON API, or what was written to GitHub.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from app.demo.project import ISSUE_BODY, fix_agent_command, write_project
from app.demo.stack import LocalStack
from app.engine._history import export_history
from tests.e2e.scenario import (
    github_state,
    open_labelled_issue,
    wait_end,
    wait_phase,
    workflow_id,
)
from tests.e2e.workers import Worker
from tests.unprivileged_user import PYTHON

CANARIES = {
    "GITHUB_PRIVATE_KEY": "canary-env-private-key-d41c",
    "GITHUB_WEBHOOK_SECRET": "canary-env-webhook-3f90",
    "REPAIRBOT_CANARY_TOKEN": "canary-env-token-77ab",
}


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    # A Python any worker can run: the unprivileged one cannot reach the test's.
    return write_project(tmp_path / "project", python=PYTHON or sys.executable)


def hostile_issue(stack: LocalStack, db_url: str, key_file: Path, worker: Worker) -> str:
    assert stack.settings is not None
    data = worker.data_dir(stack)
    python = worker.python
    port = urlsplit(stack.settings.github_api_url).port
    db = db_url.removeprefix("sqlite:///")
    steal = (
        "cat /proc/*/environ | tr '\\\\0' '\\\\n'; "
        f"cat {key_file} {db}; ls -R {data} {data}/workspaces; "
        f"{python} -c 'import socket; "
        f'socket.create_connection((\\"127.0.0.1\\", {port}), 3)\'; '
        f"{python} -m unittest tests.test_punctuation"
    )
    return f'{ISSUE_BODY}\n\n```repro\nsh -c "{steal}"\n```\n'


@pytest.mark.slow
async def test_a_repro_block_that_hunts_secrets_finds_none(
    stack: LocalStack,
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    worker: Worker,
) -> None:
    """Under the root worker and the unprivileged one (tests/e2e/workers.py)."""
    caplog.set_level(logging.INFO)
    for name, value in CANARIES.items():
        monkeypatch.setenv(name, value)  # as if the worker had been started the old way
    assert stack.settings is not None
    key_file = worker.home / "app-key.pem"
    key_file.write_text(stack.settings.github_private_key)
    key_file.chmod(0o600)
    worker.start(
        stack,
        environ=CANARIES,
        agent_command=tuple(fix_agent_command(python=worker.python)),
        github_private_key_file=worker.own(key_file),
    )
    body = hostile_issue(stack, db_url, key_file, worker)
    number = await open_labelled_issue(stack, body=body)
    status = await wait_phase(stack, number, "awaiting-review", timeout=120)
    assert status["pull_number"]  # the run went on: reproduced, repaired, verified, PR

    settings = stack.settings
    secrets = [
        *CANARIES.values(),
        settings.github_webhook_secret,
        # Lines of the PEM body: any of them in the open is a leak.
        *[line for line in settings.github_private_key.splitlines() if len(line) > 40][:5],
    ]
    assert stack.runtime is not None
    run = stack.runtime.store.find_run(workflow_id(stack, number))
    assert run is not None
    places: dict[str, str] = {
        "history": str(export_history(stack.runtime.store, run.run_id)),
        "logs": caplog.text + worker.logs(),
    }
    # Every artifact the run's history names, read back from the evidence store.
    assert stack.clients is not None
    store = stack.clients.evidence
    shas = sorted(set(re.findall(r"\b[0-9a-f]{64}\b", places["history"])))
    evidence = [sha for sha in shas if store.exists(sha)]
    assert evidence, "the reproduction's log is evidence"
    reproduction_logs = ""
    for sha in evidence:
        text = store.get(sha).decode(errors="replace")
        places[f"evidence {sha[:12]}"] = text
        if "sh -c" in text:
            reproduction_logs += text
    async with httpx.AsyncClient(base_url=stack.app_url) as client:
        places["api runs"] = (await client.get("/api/runs")).text
        places["api run"] = (await client.get(f"/api/runs/{run.run_id}")).text
    state = await github_state(stack, number)
    places["github"] = str(state["comments"]) + str(state["pulls"])
    for where, text in places.items():
        for secret in secrets:
            assert secret not in text, f"{secret[:12]}... leaked into {where}"
    if worker.uid is not None:  # its commands ran as a subordinate uid, not as the worker
        assert "uid 65534 of a user namespace" in worker.sandbox_line(), worker.logs()[-3000:]
    # The attempts really ran, and really failed.
    assert "No such file or directory" in reproduction_logs
    assert "Connection refused" in reproduction_logs
    assert "sandbox: no network" in reproduction_logs


@pytest.mark.slow
async def test_without_a_sandbox_no_repository_code_runs(
    stack: LocalStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker whose only sandbox, bubblewrap, is missing: PATH has everything else.
    tools = tmp_path / "tools-without-bwrap"
    tools.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        for program in Path(directory).glob("*") if Path(directory).is_dir() else ():
            if program.name not in ("bwrap", "unshare") and not (tools / program.name).exists():
                (tools / program.name).symlink_to(program)
    monkeypatch.setenv("PATH", str(tools))
    ran = tmp_path / "repository-code-ran"
    body = f"{ISSUE_BODY}\n\n```repro\ntouch {ran}\n```\n"
    stack.start_repairbot(agent_command=tuple(fix_agent_command()), sandbox="bwrap")
    number = await open_labelled_issue(stack, body=body)
    run = await wait_end(stack, number, timeout=120)
    assert not ran.exists()
    assert run.result["outcome"] == "error" and run.result["reproduced"] is None
    assert "Repository code was not run" in run.result["detail"]
    # The maintainer reads why on the issue.
    [comment] = (await github_state(stack, number))["status_comments"]
    assert "no sandbox for repository commands" in comment["body"]
    assert "Repository code was not run" in comment["body"]
