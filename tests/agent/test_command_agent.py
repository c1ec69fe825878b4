"""The command back end with a real CLI agent (app/demo/agents/fix_known_bug.py)."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from app.agent import AgentFailed, AgentRequest, CommandAgent, Feedback
from app.repo_config import Command
from app.sandbox.runner import Sandbox
from app.workspace import Workspace, build_workspace, snapshot
from tests.agent.sample_repo import FIX_ARGV, PYTHON, SampleRepo

FAST = Sandbox(heartbeat_interval=0.05)


def request(ws: Workspace, **kwargs: object) -> AgentRequest:
    params: dict[str, object] = {
        "workspace": ws,
        "issue_title": "add() subtracts",
        "issue_body": "`add(2, 3)` returns -1.\n\n```repro\npython -c 'assert add(2, 3) == 5'\n```",
        "reproduction": ["python -c 'assert add(2, 3) == 5'"],
        "reproduction_output": "AssertionError: -1\n",
    }
    params.update(kwargs)
    return AgentRequest(**params)  # type: ignore[arg-type]


async def test_the_proposal_is_the_diff_the_agent_leaves(
    tmp_path: Path, workspace: Workspace, sample_repo: SampleRepo
) -> None:
    agent = CommandAgent(Command.of(FIX_ARGV), time_limit=30, sandbox=FAST)
    proposal = await agent.propose(request(workspace))
    assert proposal.files_changed == ["calc.py"]
    assert "-    return a - b\n+    return a + b" in proposal.patch
    assert proposal.summary == "Replaced the faulty expression in calc.py."
    assert (proposal.input_tokens, proposal.output_tokens) == (0, 0)
    assert proposal.backend == f"command:{Path(PYTHON).name}"
    assert b"attempt 1: add() subtracts" in proposal.transcript
    # The patch stands on its own: it applies to a fresh checkout of the base.
    fresh = await build_workspace(
        tmp_path / "again",
        clone_url=sample_repo.url,
        base_sha=sample_repo.base_sha,
        patch=proposal.patch,
    )
    assert "return a + b" in (fresh.repo / "calc.py").read_text()


async def test_inputs_arrive_as_files_outside_the_tree_and_never_through_a_shell(
    workspace: Workspace,
) -> None:
    # An "agent" that records what it was given; the issue text tries shell injection.
    recorder = (
        "import json, os, pathlib; "
        "names = [k for k in os.environ if k.startswith('REPAIRBOT_')]; "
        "pathlib.Path(os.environ['REPAIRBOT_RESULT_FILE']).write_text(json.dumps("
        "{'summary': json.dumps({k: os.environ[k] for k in names}), 'input_tokens': 7}))"
    )
    hostile = "$(touch pwned) `touch pwned2`; touch pwned3 && echo \"'"
    agent = CommandAgent(Command.of([PYTHON, "-c", recorder]), time_limit=30, sandbox=FAST)
    proposal = await agent.propose(
        request(
            workspace,
            issue_title=hostile,
            issue_body=hostile,
            feedback=[Feedback(kind="review", text="please also handle floats")],
            attempt=3,
        )
    )
    env = json.loads(proposal.summary)
    assert proposal.patch == "" and proposal.input_tokens == 7
    assert not list(workspace.repo.glob("pwned*")) and not list(workspace.root.rglob("pwned*"))
    assert env["REPAIRBOT_ATTEMPT"] == "3" and env["REPAIRBOT_BASE_SHA"] == workspace.base_sha
    for name in ("ISSUE", "REPRO_OUTPUT", "FEEDBACK", "REQUEST"):
        path = Path(env[f"REPAIRBOT_{name}_FILE"])
        assert path.is_file() and path.parent == workspace.scratch
        assert workspace.repo not in path.parents
    assert hostile in Path(env["REPAIRBOT_ISSUE_FILE"]).read_text()
    assert "please also handle floats" in Path(env["REPAIRBOT_FEEDBACK_FILE"]).read_text()
    payload = json.loads(Path(env["REPAIRBOT_REQUEST_FILE"]).read_text())
    assert payload["attempt"] == 3 and payload["feedback"][0]["kind"] == "review"


async def test_operator_extras_reach_the_agent_but_worker_secrets_do_not(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_worker_secret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-worker-key")
    agent = CommandAgent(
        Command(shell="env > $REPAIRBOT_RESULT_FILE.env; cp $REPAIRBOT_RESULT_FILE.env log.txt"),
        time_limit=30,
        sandbox=FAST,
        extra_env={"AGENT_API_KEY": "sk-offered-by-operator"},
    )
    proposal = await agent.propose(request(workspace))
    env = (workspace.repo / "log.txt").read_text()
    assert "sk-offered-by-operator" in env
    assert "ghs_worker_secret" not in env and "sk-worker-key" not in env
    assert proposal.files_changed == ["log.txt"]


async def test_a_diff_is_taken_from_the_baseline(workspace: Workspace) -> None:
    (workspace.repo / "setup-output.txt").write_text("made by setup\n")
    baseline = await snapshot(workspace)
    agent = CommandAgent(Command.of(FIX_ARGV), time_limit=30, sandbox=FAST)
    proposal = await agent.propose(request(workspace, baseline=baseline))
    assert proposal.files_changed == ["calc.py"] and "setup-output" not in proposal.patch


async def test_an_agent_that_commits_still_proposes_against_the_base(workspace: Workspace) -> None:
    script = f"{shlex.join(FIX_ARGV)} && git commit -qam fix"
    agent = CommandAgent(Command(shell=script), time_limit=30, sandbox=FAST)
    proposal = await agent.propose(request(workspace))
    assert "+    return a + b" in proposal.patch


async def test_an_agent_that_fails_or_hangs_is_an_agent_failure(workspace: Workspace) -> None:
    broken = [*FIX_ARGV[:3], "calc.py", "--old", "no such text", "--new", "x"]
    with pytest.raises(AgentFailed, match="exited with status 1") as caught:
        await CommandAgent(Command.of(broken), time_limit=30, sandbox=FAST).propose(
            request(workspace)
        )
    assert b"cannot find 'no such text'" in caught.value.transcript
    with pytest.raises(AgentFailed, match=r"did not finish within 0\.3s"):
        await CommandAgent(Command(shell="sleep 30"), time_limit=0.3, sandbox=FAST).propose(
            request(workspace)
        )


async def test_wrong_first_then_right_with_feedback(
    tmp_path: Path, workspace: Workspace, sample_repo: SampleRepo
) -> None:
    agent = CommandAgent(
        Command.of([*FIX_ARGV, "--wrong-first", "a * b"]), time_limit=30, sandbox=FAST
    )
    first = await agent.propose(request(workspace))
    assert "+    return a * b" in first.patch
    retry_ws = await build_workspace(
        tmp_path / "attempt-2",
        clone_url=sample_repo.url,
        base_sha=sample_repo.base_sha,
        patch=None,
    )
    feedback = [Feedback(kind="verification", text="The reproduction still fails: 6 != 5")]
    second = await agent.propose(request(retry_ws, feedback=feedback, attempt=2))
    assert "+    return a + b" in second.patch
    assert second.summary.endswith("Took the feedback on the previous attempt into account.")


def test_the_example_agent_takes_a_spec_file_or_variable(tmp_path: Path) -> None:
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    spec = tmp_path / "fix.json"
    spec.write_text(json.dumps([{"path": "calc.py", "old": "a - b", "new": "a + b"}]))
    script = FIX_ARGV[1]
    done = subprocess.run([PYTHON, script, "--spec", str(spec)], cwd=tmp_path, capture_output=True)
    assert done.returncode == 0 and "a + b" in (tmp_path / "calc.py").read_text()
    again = subprocess.run(
        [PYTHON, script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"REPAIRBOT_FIX_SPEC": spec.read_text(), "PATH": "/usr/bin:/bin"},
    )
    assert again.returncode == 0 and "already fixed" in again.stdout
    missing = subprocess.run([PYTHON, script], cwd=tmp_path, capture_output=True, text=True, env={})
    assert missing.returncode != 0 and "give --path" in missing.stderr
