"""The built-in agent's opening message: the issue, the failing reproduction,
feedback on earlier attempts and the files the failure points at."""

from __future__ import annotations

import re

from app.agent.base import AgentRequest
from app.agent.context import ContextFile

#: Only the end of a long failing output is quoted: that is where the error is.
REPRO_OUTPUT_BYTES = 8_000
FEEDBACK_BYTES = 6_000


def _fence(text: str) -> str:
    # A fence longer than any backtick run inside keeps the content intact.
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _tail(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return "[... earlier output omitted ...]\n" + data[-limit:].decode(errors="replace")


def user_message(request: AgentRequest, files: list[ContextFile]) -> str:
    parts = [f"# Issue: {request.issue_title}\n\n{request.issue_body.strip()}"]
    commands = "\n".join(request.reproduction) or "(none given)"
    output = _tail(request.reproduction_output, REPRO_OUTPUT_BYTES)
    parts.append(
        f"# Reproduction\n\nThis fails on the current code:\n\n{_fence(commands)}\n{commands}\n"
        f"{_fence(commands)}\n\nIts output:\n\n{_fence(output)}text\n{output}\n{_fence(output)}"
    )
    if request.feedback:
        notes = "\n\n".join(
            f"## {item.kind}\n\n{_tail(item.text, FEEDBACK_BYTES)}" for item in request.feedback
        )
        parts.append(f"# Why earlier attempts were not accepted\n\n{notes}")
    shown = []
    for item in files:
        note = f" (first {len(item.text.encode())} of {item.size} bytes)" if item.truncated else ""
        fence = _fence(item.text)
        shown.append(f"## {item.path}{note}\n\n{fence}\n{item.text}\n{fence}")
    parts.append("# Files\n\n" + ("\n\n".join(shown) or "(no files could be shown)"))
    return "\n\n".join(parts) + "\n"
