"""A repository whose setup asks for the network, through the whole repair (issue 19, item 1).

Its setup script (`network: setup`) tries to reach what a hostile setup
reached before: PostgreSQL, Redis, the web port, the emulator, the metadata
address, directly and through the egress proxy. The base's setup gets the
proxy and nothing else; verification runs the candidate's setup with no
network at all. The run goes on to a draft PR either way.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from app.demo.project import fix_agent_command, write_project
from app.demo.stack import LocalStack
from app.engine._history import export_history
from tests.e2e.scenario import open_labelled_issue, wait_phase, workflow_id
from tests.e2e.workers import Worker
from tests.unprivileged_user import PYTHON

PROBE = r"""
import json, os, socket, sys
targets = json.load(open(".github/targets.json"))
out = {"proxy": os.environ.get("HTTPS_PROXY", "none"), "direct": {}, "via_proxy": {}}
for host, port in targets:
    try:
        socket.create_connection((host, port), 3).close()
        out["direct"][f"{host}:{port}"] = "REACHED"
    except OSError as exc:
        out["direct"][f"{host}:{port}"] = f"blocked: {exc}"
    if out["proxy"] != "none":
        proxy = out["proxy"].split("//")[1].rsplit(":", 1)
        s = socket.create_connection((proxy[0], int(proxy[1])), 5)
        s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode())
        out["via_proxy"][f"{host}:{port}"] = s.recv(200).decode(errors="replace").split("\r\n")[0]
print("PROBE " + json.dumps(out))
"""


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    # A Python any worker can run: the unprivileged one cannot reach the test's.
    return write_project(tmp_path / "project", python=PYTHON or sys.executable)


@pytest.mark.slow
async def test_a_networked_setup_reaches_none_of_the_workers_services(
    stack: LocalStack, seed: Path, worker: Worker
) -> None:
    """Under the root worker and the unprivileged one (tests/e2e/workers.py)."""
    settings = stack.settings
    assert settings is not None
    targets = [
        ["127.0.0.1", 5432],  # PostgreSQL
        ["127.0.0.1", 6379],  # Redis
        ["127.0.0.1", urlsplit(settings.github_api_url).port],  # the emulator
        ["127.0.0.1", urlsplit(stack.app_url).port],  # repairbot's web port
        ["169.254.169.254", 80],
        ["10.0.0.1", 80],
    ]
    people = stack.people
    config = (seed / ".github" / "repairbot.yml").read_text()
    config += f"network: setup\nsetup: [[{json.dumps(worker.python)}, .github/probe.py]]\n"
    # Setup before every step: the candidate's own setup must run (without network).
    config += "setup_once: false\n"
    await stack.gh.push_as(
        people.owner,
        people.owner,
        stack.repo_name,
        "main",
        {
            ".github/repairbot.yml": config,
            ".github/probe.py": PROBE,
            ".github/targets.json": json.dumps(targets),
        },
        message="setup that wants the network",
    )
    worker.start(stack, agent_command=tuple(fix_agent_command(python=worker.python)))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review", timeout=180)
    assert status["pull_number"]

    assert stack.runtime is not None
    run = stack.runtime.store.find_run(workflow_id(stack, number))
    assert run is not None
    history = str(export_history(stack.runtime.store, run.run_id))
    assert stack.clients is not None
    store = stack.clients.evidence
    probes: dict[str, list[dict[str, object]]] = {"network": [], "no network": []}
    for sha in sorted(set(re.findall(r"\b[0-9a-f]{64}\b", history))):
        if not store.exists(sha):
            continue
        text = store.get(sha).decode(errors="replace")
        for header, line in re.findall(r"# setup; sandbox: ([a-z ]+)\n(PROBE .*)", text):
            probes[header].append(json.loads(line.removeprefix("PROBE ")))
    base, candidate = probes["network"], probes["no network"]
    assert base and candidate, probes  # the base's setup and the candidate's both ran
    for probe in base + candidate:
        direct = probe["direct"]
        assert isinstance(direct, dict)
        assert all(v.startswith("blocked") for v in direct.values()), probe
    for probe in base:
        assert probe["proxy"] == "http://127.0.0.1:3128"
        via = probe["via_proxy"]
        assert isinstance(via, dict) and len(via) == len(targets)
        assert all(v.startswith("HTTP/1.1 403") for v in via.values()), probe
    assert all(probe["proxy"] == "none" for probe in candidate)
    if worker.uid is not None:  # its commands ran as a subordinate uid, not as the worker
        assert "uid 65534 of a user namespace" in worker.sandbox_line(), worker.logs()[-3000:]
