"""The built-in agent's tools: what the model may do in the workspace.

Reading, searching and editing go through :class:`app.agent.files.Checkout`
(confined, no symlinks). Commands (the reproduction, the tests, anything
else) go through the sandboxed command runner, :func:`app.sandbox.runner.run_command`,
with the same limits, scrubbed environment and network policy as the
repository's own commands; nothing of the worker's secrets is passed.

A tool never raises for a mistake of the model: it answers with an error
text (``ok=False``) the model can act on. Only infrastructure failures
(cancellation, a lost lease) propagate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.agent.files import Checkout, FileRefused
from app.agent.search import SEARCH_TIME_LIMIT, search
from app.repo_config import Command
from app.sandbox.runner import Heartbeat, Sandbox, run_command
from app.workspace import Workspace

#: Most text a tool hands back to the model (the end is kept for command output).
MAX_TOOL_OUTPUT = 12_000
MAX_LISTED = 400


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


def _obj(properties: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


_STR = {"type": "string"}
_INT = {"type": "integer"}

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "list_files",
        "List the files under a directory of the repository (default: the root).",
        _obj({"path": _STR}),
    ),
    ToolSpec(
        "read_file",
        "Read a file of the repository, with line numbers; optionally only lines "
        "start_line..end_line (1-based, inclusive).",
        _obj({"path": _STR, "start_line": _INT, "end_line": _INT}, ["path"]),
    ),
    ToolSpec(
        "search",
        "Search the repository's files for a regular expression (Python syntax); "
        "answers path:line: text for each match.",
        _obj({"pattern": _STR, "path": _STR}, ["pattern"]),
    ),
    ToolSpec(
        "replace_in_file",
        "Replace the exact text old_text, which must occur exactly once in the file, "
        "with new_text.",
        _obj({"path": _STR, "old_text": _STR, "new_text": _STR}, ["path", "old_text", "new_text"]),
    ),
    ToolSpec(
        "write_file",
        "Write a whole file (created if missing, replaced otherwise).",
        _obj({"path": _STR, "content": _STR}, ["path", "content"]),
    ),
    ToolSpec(
        "run_reproduction",
        "Run the bug's reproduction; it fails on the unfixed code.",
        _obj({}),
    ),
    ToolSpec("run_tests", "Run the repository's test suite.", _obj({})),
    ToolSpec(
        "run_command",
        "Run a shell command in the repository root (sandboxed, time-limited).",
        _obj({"command": _STR}, ["command"]),
    ),
    ToolSpec(
        "finish",
        "Finish: the changes in the working tree are your proposal. Give a short summary "
        "of the cause and the fix.",
        _obj({"summary": _STR}, ["summary"]),
    ),
)
TOOL_NAMES = frozenset(t.name for t in TOOLS)
#: Tools that only touch files (synchronous, run in a thread).
_FILE_TOOLS = frozenset({"list_files", "read_file", "replace_in_file", "write_file"})


@dataclass(frozen=True)
class ToolOutcome:
    output: str
    ok: bool = True
    finished: bool = False


class MalformedCall(Exception):
    """The call named no known tool or its arguments do not fit; for the model."""


@dataclass
class Toolbox:
    workspace: Workspace
    reproduction: list[Command]
    tests: Command | None
    time_limit: float
    sandbox: Sandbox | None = None
    heartbeat: Heartbeat | None = None
    #: Whether the agent's commands may reach the network (the operator's choice).
    network: bool = False
    #: Longest a model-chosen regular expression may search (seconds).
    search_time_limit: float = SEARCH_TIME_LIMIT
    checkout: Checkout = field(init=False)

    def __post_init__(self) -> None:
        self.checkout = Checkout(self.workspace.repo)

    async def run(self, name: str, args: dict[str, Any] | None) -> ToolOutcome:
        """Run one call; raises :class:`MalformedCall` for a call that cannot be run."""
        if name not in TOOL_NAMES:
            raise MalformedCall(f"there is no tool named {name!r}; use one of {sorted(TOOL_NAMES)}")
        if args is None:
            raise MalformedCall(f"the arguments of {name} are not a JSON object")
        spec = next(t for t in TOOLS if t.name == name)
        missing = [key for key in spec.parameters["required"] if key not in args]
        wrong = [
            key
            for key, value in args.items()
            if key not in spec.parameters["properties"]
            or not isinstance(value, str if spec.parameters["properties"][key] is _STR else int)
        ]
        if missing or wrong:
            raise MalformedCall(
                f"{name} needs {spec.parameters['required'] or 'no arguments'} with the types "
                f"of its schema; missing {missing}, unexpected or mistyped {wrong}"
            )
        method = getattr(self, f"_{name}")
        try:
            if name in _FILE_TOOLS:
                # Disk reads and writes off the event loop: the workspace is
                # the sandbox's, and a slow read must not stall heartbeats.
                outcome: ToolOutcome = await asyncio.to_thread(method, **args)
            else:
                outcome = await method(**args)
            return outcome
        except FileRefused as exc:
            return ToolOutcome(str(exc), ok=False)

    def _list_files(self, path: str = ".") -> ToolOutcome:
        files = []
        for index, name in enumerate(self.checkout.walk(path)):
            if index == MAX_LISTED:
                files.append(f"... (more than {MAX_LISTED} files; list a subdirectory)")
                break
            files.append(name)
        return ToolOutcome("\n".join(files) or "(no files)")

    def _read_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> ToolOutcome:
        data = self.checkout.read(path)
        if b"\0" in data[:8000]:
            return ToolOutcome(f"{path}: a binary file ({len(data)} bytes)", ok=False)
        lines = data.decode(errors="replace").splitlines()
        first = max(start_line or 1, 1)
        last = min(end_line or len(lines), len(lines))
        shown = [f"{n:>5}  {lines[n - 1]}" for n in range(first, last + 1)]
        return ToolOutcome(_cap("\n".join(shown) or f"{path}: (empty)", keep="head"))

    async def _search(self, pattern: str, path: str = ".") -> ToolOutcome:
        # In a child process with a deadline: the pattern is the model's.
        ok, text = await search(
            self.workspace.repo, pattern, path, time_limit=self.search_time_limit
        )
        return ToolOutcome(text, ok=ok)

    def _replace_in_file(self, path: str, old_text: str, new_text: str) -> ToolOutcome:
        text = self.checkout.read(path).decode(errors="surrogateescape")
        count = text.count(old_text) if old_text else 0
        if count != 1:
            found = "does not occur" if count == 0 else f"occurs {count} times"
            return ToolOutcome(
                f"{path}: old_text {found}; give text that occurs exactly once "
                "(copy it from read_file, without the line numbers)",
                ok=False,
            )
        self.checkout.write(path, text.replace(old_text, new_text).encode(errors="surrogateescape"))
        return ToolOutcome(f"{path}: replaced 1 occurrence")

    def _write_file(self, path: str, content: str) -> ToolOutcome:
        self.checkout.write(path, content.encode())
        return ToolOutcome(f"{path}: wrote {len(content.encode())} bytes")

    async def _run_reproduction(self) -> ToolOutcome:
        if not self.reproduction:
            return ToolOutcome("this repository has no reproduction command", ok=False)
        parts = []
        for command in self.reproduction:
            exit_code, text = await self._command(command)
            parts.append(text)
            if exit_code != 0:
                break
        return ToolOutcome(_cap("\n\n".join(parts)))

    async def _run_tests(self) -> ToolOutcome:
        if self.tests is None:
            return ToolOutcome("this repository has no test command configured", ok=False)
        return ToolOutcome(_cap((await self._command(self.tests))[1]))

    async def _run_command(self, command: str) -> ToolOutcome:
        return ToolOutcome(_cap((await self._command(Command(shell=command)))[1]))

    async def _finish(self, summary: str) -> ToolOutcome:
        return ToolOutcome(summary.strip()[:4000], finished=True)

    async def _command(self, command: Command) -> tuple[int, str]:
        ws = self.workspace
        run = await run_command(
            command,
            cwd=ws.repo,
            home=ws.home,
            tmpdir=ws.tmp,
            time_limit=self.time_limit,
            sandbox=self.sandbox,
            heartbeat=self.heartbeat,
            network=self.network,
        )
        result = run.result
        status = "timed out" if result.timed_out else f"exit status {result.exit_code}"
        return result.exit_code, f"$ {command.display()}\n[{status}]\n" + run.output.decode(
            errors="replace"
        )


def _cap(text: str, *, keep: str = "tail") -> str:
    if len(text) <= MAX_TOOL_OUTPUT:
        return text
    note = f"[... {len(text) - MAX_TOOL_OUTPUT} characters omitted ...]"
    if keep == "head":
        return text[:MAX_TOOL_OUTPUT] + "\n" + note
    return text[:2000] + "\n" + note + "\n" + text[-(MAX_TOOL_OUTPUT - 2000) :]
