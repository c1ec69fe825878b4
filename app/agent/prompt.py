"""What an HTTP agent asks the model, and how the diff is read from its answer."""

from __future__ import annotations

import re

from app.agent.base import AgentRequest
from app.agent.context import ContextFile
from app.repo_config import fenced_blocks

SYSTEM = """\
You are repairbot, a careful software engineer fixing one bug in a repository.
Answer with one short paragraph explaining the cause and the fix, then the fix
as a unified diff in a single ```diff fenced block. Paths are relative to the
repository root with a/ and b/ prefixes (as `git diff` prints them), and the
diff must apply to the files exactly as shown. Change only what the fix needs;
do not reformat unrelated code."""

#: Only the end of a long failing output is quoted: that is where the error is.
REPRO_OUTPUT_BYTES = 8_000
FEEDBACK_BYTES = 6_000

_DIFF_INFO = {"diff", "patch", "udiff"}
_DIFF_START = re.compile(r"^(diff --git |--- (a/|/dev/null))", re.MULTILINE)


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


def retry_message(problem: str) -> str:
    return (
        f"That answer cannot be used: {problem}\n"
        "Reply again with the complete fix as one unified diff in a ```diff block, "
        "against the files exactly as shown above."
    )


def extract_diff(reply: str) -> str | None:
    """The diff in a model's reply: its ```diff blocks joined, or else the
    raw text from the first ``diff --git`` / ``--- a/`` line on."""
    blocks = [content for info, content in fenced_blocks(reply) if _is_diff(info, content)]
    if blocks:
        return "\n".join(block.rstrip("\n") for block in blocks) + "\n"
    start = _DIFF_START.search(reply)
    if start is None:
        return None
    return reply[start.start() :].rstrip("`\n ") + "\n"


def _is_diff(info: str, content: str) -> bool:
    words = info.split()
    if words and words[0].lower() in _DIFF_INFO:
        return True
    return not words and _DIFF_START.search(content) is not None
