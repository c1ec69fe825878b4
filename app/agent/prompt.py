"""The built-in agent's opening message: the issue, the failing reproduction,
feedback on earlier attempts and the files the failure points at."""

from __future__ import annotations

import re

from app.agent.base import AgentRequest, Feedback
from app.agent.context import ContextFile
from app.agent.untrusted import issue_for_model, untrusted_block, visible_text

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


def feedback_for_model(item: Feedback) -> str:
    """A reviewer's words are comment text like the issue's: visible parts only, as data."""
    if item.kind != "review":
        return item.text
    return untrusted_block("REVIEW", visible_text(item.text))


def user_message(request: AgentRequest, files: list[ContextFile]) -> str:
    # Only what readers of the issue see, framed as data (app/agent/untrusted.py).
    parts = ["# Issue: " + issue_for_model(request.issue_title, request.issue_body)[2:]]
    commands = "\n".join(request.reproduction) or "(none given)"
    output = _tail(request.reproduction_output, REPRO_OUTPUT_BYTES)
    parts.append(
        f"# Reproduction\n\nThis fails on the current code:\n\n{_fence(commands)}\n{commands}\n"
        f"{_fence(commands)}\n\nIts output:\n\n{_fence(output)}text\n{output}\n{_fence(output)}"
    )
    if request.feedback:
        notes = "\n\n".join(
            f"## {item.kind}\n\n{_tail(feedback_for_model(item), FEEDBACK_BYTES)}"
            for item in request.feedback
        )
        parts.append(f"# Why earlier attempts were not accepted\n\n{notes}")
    shown = []
    for item in files:
        note = f" (first {len(item.text.encode())} of {item.size} bytes)" if item.truncated else ""
        fence = _fence(item.text)
        shown.append(f"## {item.path}{note}\n\n{fence}\n{item.text}\n{fence}")
    parts.append("# Files\n\n" + ("\n\n".join(shown) or "(no files could be shown)"))
    return "\n\n".join(parts) + "\n"
