"""``repairbot demo``: the whole product on one machine.

An emulated GitHub with a real repository (a bug and a failing test), repairbot
serving webhooks in this process, and a worker in a separate process. A
maintainer labels the issue; the run reproduces the bug, a real command agent
applies a fix, verification passes, a draft pull request opens, a scripted
reviewer approves the exact commit, and the run merges it. With ``--crash`` the
worker is killed with SIGKILL at a random moment mid-run and a fresh one
resumes: the check at the end shows one branch, one pull request, one status
comment and one merge all the same. With ``--agent builtin`` the fix comes
from the built-in agent loop instead, talking real HTTP to a scripted
OpenAI-compatible model (:mod:`app.demo.scripted_model`) that reads,
searches, edits and runs the tests before it calls ``finish``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.config import Settings
from app.contracts.ids import repair_workflow_id
from app.demo.project import ISSUE_BODY, ISSUE_TITLE, fix_agent_command, write_project
from app.demo.scripted_model import API_KEY, ScriptedModel, demo_repair_script
from app.demo.serve import ServerThread, bind
from app.demo.spawn import spawn_repairbot
from app.demo.stack import LocalStack
from app.engine import SETTLED, until_stopped
from app.sandbox import describe


@dataclass
class Timeline:
    started: float = field(default_factory=time.monotonic)
    phases: list[tuple[str, float]] = field(default_factory=list)

    def now(self) -> float:
        return time.monotonic() - self.started

    def enter(self, phase: str) -> None:
        self.phases.append((phase, self.now()))

    def durations(self, end: float) -> list[tuple[str, float]]:
        marks = [*self.phases, ("end", end)]
        return [(name, marks[i + 1][1] - at) for i, (name, at) in enumerate(marks[:-1])]


class WorkerProcess:
    """``repairbot worker`` in a process of its own, so it can really be killed."""

    def __init__(
        self, settings: Settings, log_path: Path, *, extra_env: dict[str, str] | None = None
    ) -> None:
        self.settings = settings
        self.log_path = log_path
        self.extra_env = dict(extra_env or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.generation = 0

    def start(self) -> None:
        self.generation += 1
        env = {**self.extra_env, "REPAIRBOT_WORKER_ID": f"demo-worker-{self.generation}"}
        with self.log_path.open("ab") as log:
            self.process = spawn_repairbot(["worker"], self.settings, log=log, extra_env=env)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


#: The worker environment variable holding the scripted model's (fake) key.
DEMO_MODEL_KEY = "REPAIRBOT_DEMO_MODEL_KEY"


def builtin_agent_env(openai_base_url: str, *, model: str = "scripted-demo") -> dict[str, str]:
    """Worker environment that makes the built-in agent, against the given
    OpenAI-compatible server, the operator's default agent."""
    agent = {
        "backend": "http",
        "provider": "openai",
        "model": model,
        "base_url": openai_base_url,
        "api_key_env": DEMO_MODEL_KEY,
    }
    return {
        "REPAIRBOT_AGENT_DEFAULT": json.dumps(agent),
        # The key is bound to the one URL it may be sent to.
        "REPAIRBOT_AGENT_API_KEYS": f"{DEMO_MODEL_KEY}={openai_base_url}",
        "REPAIRBOT_AGENT_BASE_URLS": openai_base_url,
        DEMO_MODEL_KEY: API_KEY,
    }


def demo_test_command(python: str = sys.executable) -> str:
    """The demo repository's test command, as the scripted model types it."""
    return shlex.join([python, "-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v"])


CRASH_PHASES = ("preparing", "reproducing", "repairing", "publishing", "merging")


def _reached(phase: str | None, target: str) -> bool:
    """Whether the run is in ``target`` or past it (before the end)."""
    order = [*CRASH_PHASES[: CRASH_PHASES.index("merging")], "awaiting-review", "merging"]
    return phase in order and order.index(phase) >= order.index(target)


def say(text: str = "") -> None:
    print(text, flush=True)


async def run_demo(
    *,
    crash: bool,
    keep: Path | None,
    seed: int | None,
    timeout: float,
    agent: str = "command",
    serve_after: bool = False,
) -> int:
    """``serve_after``: once the run ended, keep the emulated GitHub, repairbot
    and the worker serving until SIGINT or SIGTERM, so the dashboard the demo
    advertises can be opened."""
    rng = random.Random(seed)  # noqa: S311 (picks a crash moment, not a secret)
    root = keep or Path(tempfile.mkdtemp(prefix="repairbot-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    stack = LocalStack(root=root)
    timeline = Timeline()
    worker: WorkerProcess | None = None
    model: ScriptedModel | None = None
    model_server: ServerThread | None = None
    try:
        say("repairbot demo: an emulated GitHub, repairbot, and a worker process on this machine")
        project = write_project(root / "project")
        settings = await stack.start_github(project)
        settings = settings.with_overrides(
            agent_command=tuple(fix_agent_command()) if agent == "command" else (),
            relay_grace=0.2,
            reconcile_interval=0.1,
            worker_silence=2.0,
        )
        worker_env: dict[str, str] = {}
        if agent == "builtin":
            model = ScriptedModel(demo_repair_script(demo_test_command()))
            model_server = ServerThread(model.app, bind(), name="scripted-model").start()
            worker_env = builtin_agent_env(f"{model_server.url}/v1")
        stack.settings = settings
        runtime = stack.start_repairbot(run_worker=False)
        worker = WorkerProcess(settings, root / "worker.log", extra_env=worker_env)
        worker.start()
        say(f"  GitHub (emulated)  {settings.github_git_url}")
        if model_server is not None:
            say(f"  model (scripted)   {model_server.url}/v1 (OpenAI-compatible, tool calling)")
        say(f"  repairbot          {stack.app_url}/webhooks/github")
        say(f"  dashboard          {stack.app_url}/ (sign in as {stack.people.maintainer})")
        say(f"  data               {settings.data_dir}")
        say(f"  sandbox            {describe(settings.isolation())}")
        say()
        people = stack.people
        issue = await stack.gh.create_issue(
            people.owner, stack.repo_name, as_user=people.owner, title=ISSUE_TITLE, body=ISSUE_BODY
        )
        number = int(issue["number"])
        say(f"@{people.owner} opened issue #{number}: {ISSUE_TITLE}")
        await stack.gh.add_label(
            people.owner, stack.repo_name, number, "repairbot", as_user=people.maintainer
        )
        say(f"@{people.maintainer} labelled it `repairbot`\n")
        workflow_id = repair_workflow_id(stack.gh.repo_id(stack.repo), number)
        # A random moment mid-run: a random phase, a random delay into it.
        crash_phase = rng.choice(CRASH_PHASES) if crash else None
        crash_delay = rng.uniform(0.0, 0.6)
        crashed = False
        approved = False
        last_phase = None
        last_detail = None
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                say(f"\ngave up after {timeout:.0f}s; worker log: {worker.log_path}")
                return 1
            run = runtime.store.find_run(workflow_id)
            if run is not None and run.status in SETTLED:
                break
            status = _status(runtime, run)
            phase = status.get("phase") if status else None
            if phase and phase != last_phase:
                timeline.enter(phase)
                detail = status.get("detail") if status else None
                shown = detail if detail != last_detail else ""
                say(f"  {timeline.now():6.2f}s  {phase:16} {shown or ''}".rstrip())
                last_phase, last_detail = phase, detail
            entered = timeline.phases[-1][1] if timeline.phases else 0.0
            if (
                crash_phase is not None
                and not crashed
                and _reached(phase, crash_phase)
                # A short phase may pass between two looks: then crash at once.
                and (phase != crash_phase or timeline.now() - entered >= crash_delay)
            ):
                crashed = True
                worker.kill()
                say(f"  {timeline.now():6.2f}s  ** worker killed with SIGKILL (phase {phase}) **")
                worker.start()
                say(
                    f"  {timeline.now():6.2f}s  ** a fresh worker started; it resumes from the "
                    "database **"
                )
            if phase == "awaiting-review" and status and status.get("pull_number") and not approved:
                approved = True
                await stack.gh.review(
                    people.owner,
                    stack.repo_name,
                    int(status["pull_number"]),
                    as_user=people.maintainer,
                    event="APPROVE",
                    body="Checked the evidence; approved.",
                )
                say(
                    f"  {timeline.now():6.2f}s  @{people.maintainer} approved PR "
                    f"#{status['pull_number']} at {str(status['proposed_sha'])[:12]}"
                )
            await asyncio.sleep(0.05)
        end = timeline.now()
        if model is not None:
            _model_summary(model)
        code = await _summary(stack, runtime, workflow_id, number, timeline, end, crashed)
        if serve_after:
            _say_how_to_look(stack, settings, worker.log_path)
            await until_stopped()
            say("stopping the demo")
        return code
    finally:
        if worker is not None:
            worker.stop()
        if model_server is not None:
            model_server.stop()
        await stack.stop()


def _say_how_to_look(stack: LocalStack, settings: Settings, worker_log: Path) -> None:
    people = stack.people
    say()
    say("the demo keeps serving until Ctrl-C (or SIGTERM):")
    say(f"  dashboard          {stack.app_url}/runs")
    say(
        f"  sign in            as {people.maintainer} (write access) or {people.owner}: the "
        "emulated GitHub's sign-in page asks only for a user name"
    )
    say(f"  repository         {settings.github_web_url}/{people.owner}/{stack.repo_name}")
    say(f"  GitHub API         {settings.github_api_url}")
    say(f"  worker log         {worker_log}")


def _model_summary(model: ScriptedModel) -> None:
    """What the built-in agent asked the model, read from the model's side."""
    turns = model.turns_asked()
    say()
    say(f"the built-in agent asked the scripted model {len(turns)} times (turns {turns})")
    last = model.requests[-1].body["messages"] if model.requests else []
    for message in last:
        for call in message.get("tool_calls") or []:
            function = call["function"]
            say(f"  tool call  {function['name']}({function['arguments'][:70]})")
    final = model.script[min(turns[-1], len(model.script) - 1)] if turns else None
    for name, args in final.calls if final else ():
        say(f"  tool call  {name}({json.dumps(args)[:70]})")


def _status(runtime: Any, run: Any) -> dict[str, Any] | None:
    if run is None:
        return None
    try:
        status: dict[str, Any] = runtime.query(run.run_id, "status")
    except Exception:
        return None  # history mid-write by the worker; ask again next tick
    return status


async def _summary(
    stack: LocalStack,
    runtime: Any,
    workflow_id: str,
    number: int,
    timeline: Timeline,
    end: float,
    crashed: bool,
) -> int:
    run = runtime.store.find_run(workflow_id)
    result = run.result or {}
    say()
    say(f"run {run.run_id}: {run.status}, outcome {result.get('outcome')}")
    owner, repo, who = stack.people.owner, stack.repo_name, stack.people.owner
    pulls = await stack.gh.rest("GET", f"/repos/{owner}/{repo}/pulls?state=all", as_user=who)
    comments = await stack.gh.rest(
        "GET", f"/repos/{owner}/{repo}/issues/{number}/comments", as_user=who
    )
    ours = await stack.run_branches()
    status_comments = [c for c in comments if "repairbot:op=" in c["body"]]
    merged = [p for p in pulls if p.get("merged_at")]
    say("what GitHub holds (read from the emulator):")
    # A merged run deletes its branch unless the repository keeps it: at most one.
    gone = " (deleted after the merge)" if not ours and merged else ""
    say(f"  branches by repairbot  {len(ours)}  {ours}{gone}")
    say(f"  pull requests          {len(pulls)}  merged: {len(merged)}")
    say(f"  status comments        {len(status_comments)}")
    if result.get("merge_commit_sha"):
        say(f"  merge commit on main   {result['merge_commit_sha']}")
    evidence = result.get("evidence") or []
    settings = stack.settings
    assert settings is not None
    where = settings.evidence_dir if settings.evidence_store == "folder" else "the database"
    say(f"evidence ({len(evidence)} items) in {where}:")
    for item in evidence:
        ref = item["ref"]
        say(f"  {item['label']:40} {ref['sha256'][:16]}  {ref['size']:>7} bytes")
    say("time per phase:")
    for phase, seconds in timeline.durations(end):
        say(f"  {phase:16} {seconds:6.2f}s")
    say(
        f"total {end:.2f}s"
        + ("; the worker was killed once and the run resumed" if crashed else "")
    )
    say(f"inspect it: REPAIRBOT_DATA_DIR={settings.data_dir} repairbot runs show '{run.run_id}'")
    exactly_once = len(ours) <= 1 and len(pulls) == 1 and len(status_comments) == 1
    ok = run.status == "completed" and result.get("outcome") == "merged" and len(merged) == 1
    if not exactly_once:
        say("!! duplicate effects found")
    return 0 if ok and exactly_once else 1
