"""Durable steps of the built-in agent: a hash chain in evidence, a small
checkpoint in the activity's heartbeat details.

Every recorded step (a model turn, a tool result, a note, a trim) is one
evidence blob ``{"prev": <sha of the previous blob>, "step": {...}}``: the
chain is append-only, each step stored once, so a long loop costs O(steps)
storage, not O(steps²). After each step the loop saves a
:class:`LoopCheckpoint` (a few hundred bytes) through the activity's
heartbeat: the chain's head, the counters, and the workspace as a patch in
evidence (the diff from the baseline: base commit + setup + the edits so
far). The next attempt of the activity receives the last checkpoint, walks
the chain back, rebuilds the workspace and carries on from the step after:
a recorded model answer is not asked for again and a recorded tool call is
not run again. What was not recorded (a tool that returned just before the
crash) runs again on the rebuilt workspace, so its edit lands once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from app.agent.budget import Usage
from app.agent.steps import STEP, Step, redact
from app.evidence import EvidenceError, EvidenceStore
from app.github.gitcmd import run_git
from app.secrets import KnownSecrets
from app.workspace import Workspace, diff_from, refuse_nested_git, workspace_git_env

log = logging.getLogger("repairbot.agent")


class LoopCheckpoint(BaseModel):
    """What the heartbeat carries: small, typed, enough to resume."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["agent-loop"] = "agent-loop"
    version: Literal[1] = 1
    #: The repair attempt this loop belongs to (a checkpoint never crosses attempts).
    repair_attempt: int
    #: Steps recorded so far, and the evidence hash of the last one.
    steps: int
    head: str
    #: Evidence hash of the diff from the baseline, ``None`` while unchanged.
    workspace_patch: str | None = None
    usage: Usage = Usage()
    corrections: int = 0


@dataclass
class LoopHost:
    """What the loop needs from the activity running it."""

    store: EvidenceStore
    #: Save a checkpoint durably; True if cancellation was requested.
    save: Callable[[dict[str, Any]], Awaitable[bool]]
    #: A progress heartbeat (carries the last checkpoint); True if cancelled.
    beat: Callable[[dict[str, Any]], Awaitable[bool]]
    #: The checkpoint the previous attempt saved last, if any.
    previous: Any = None
    #: A named fault point (crash tests); inert in production.
    fault: Callable[[str], None] = lambda _name: None
    #: Values never written to the journal or the transcript.
    secrets: KnownSecrets = field(default_factory=KnownSecrets)


@dataclass
class Journal:
    host: LoopHost
    repair_attempt: int
    steps: list[Step] = field(default_factory=list)
    head: str = ""
    workspace_patch: str | None = None
    usage: Usage = field(default_factory=Usage)
    corrections: int = 0

    @classmethod
    def resume(cls, host: LoopHost, repair_attempt: int) -> Journal | None:
        """The journal as the previous attempt left it, or ``None`` to start afresh."""
        try:
            checkpoint = LoopCheckpoint.model_validate(host.previous)
        except ValidationError:
            return None
        if checkpoint.repair_attempt != repair_attempt:
            return None
        try:
            steps = _read_chain(host.store, checkpoint.head)
        except (EvidenceError, ValueError, KeyError) as exc:
            # Evidence this worker cannot read: start the attempt afresh
            # rather than fail it (the workspace has not been touched yet).
            log.warning("agent journal %s unreadable, starting afresh: %s", checkpoint.head, exc)
            return None
        if len(steps) != checkpoint.steps:
            log.warning("agent journal has %d steps, checkpoint %d", len(steps), checkpoint.steps)
            return None
        return cls(
            host,
            repair_attempt,
            steps=steps,
            head=checkpoint.head,
            workspace_patch=checkpoint.workspace_patch,
            usage=checkpoint.usage,
            corrections=checkpoint.corrections,
        )

    def append(self, step: Step) -> None:
        """Store one step in the chain (durable once :meth:`save` returns)."""
        record = {"prev": self.head or None, "step": step.model_dump(mode="json")}
        text = redact(json.dumps(record, sort_keys=True), self.host.secrets)
        ref = self.host.store.put(
            text.encode(),
            kind="agent-step",
            name=f"agent-attempt-{self.repair_attempt}-step-{len(self.steps)}.json",
        )
        self.head = ref.sha256
        self.steps.append(STEP.validate_python(json.loads(text)["step"]))

    async def save(self, ws: Workspace | None = None, baseline: str | None = None) -> bool:
        """Record the workspace (when given) and checkpoint; True if cancelled."""
        if ws is not None and baseline is not None:
            patch = await diff_from(ws, baseline)
            self.workspace_patch = (
                self.host.store.put(
                    patch.encode(errors="surrogateescape"),
                    kind="agent-workspace",
                    name=f"agent-attempt-{self.repair_attempt}-workspace.patch",
                ).sha256
                if patch
                else None
            )
        checkpoint = LoopCheckpoint(
            repair_attempt=self.repair_attempt,
            steps=len(self.steps),
            head=self.head,
            workspace_patch=self.workspace_patch,
            usage=self.usage,
            corrections=self.corrections,
        )
        return await self.host.save(checkpoint.model_dump(mode="json"))


def _read_chain(store: EvidenceStore, head: str) -> list[Step]:
    steps: list[Step] = []
    sha: str | None = head
    while sha:
        blob = json.loads(store.get(sha))
        steps.append(STEP.validate_python(blob["step"]))
        sha = blob["prev"]
    steps.reverse()
    return steps


class WorkspaceRestoreFailed(Exception):
    pass


async def restore_workspace(ws: Workspace, baseline: str, patch: bytes | None) -> None:
    """Make the checkout the baseline tree plus ``patch``, whatever it holds now.

    ``read-tree -u --reset`` rewrites the work tree to the baseline (files
    staged but not in it are removed), then the recorded patch is applied.
    """
    # Our git directory, never the checkout's .git: setup and agents ran in
    # the checkout and may have rewritten it (core.fsmonitor, hooks, gitfiles).
    env = workspace_git_env(ws)
    await asyncio.to_thread(refuse_nested_git, ws)
    steps: list[tuple[list[str], bytes | None]] = [
        (["add", "--all"], None),
        (["read-tree", "-u", "--reset", baseline], None),
    ]
    if patch:
        steps.append((["apply", "--index", "--binary", "--whitespace=nowarn", "-"], patch))
    for args, data in steps:
        result = await run_git(args, cwd=ws.repo, env=env, input=data)
        if not result.ok:
            raise WorkspaceRestoreFailed(f"git {args[0]} failed: {result.stderr.strip()}")
