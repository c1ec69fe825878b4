"""The onboarding pull request: its branch, its operation id, its text."""

from __future__ import annotations

from app.github.markers import OpId
from app.repo_config import CONFIG_PATH

#: One onboarding proposal per repository, on this branch of the repository.
ONBOARDING_BRANCH = "repairbot/onboarding"
TITLE = "Configure repairbot"


def onboarding_op(repository_id: int) -> OpId:
    """The operation id in the onboarding PR's marker: by repository id, so a
    renamed repository still finds the proposal it already has."""
    return OpId(f"onboard:{repository_id}", "pull-request")


def new_file_patch(path: str, text: str) -> bytes:
    """A ``git apply`` patch that adds ``path`` with ``text`` (mode 100644)."""
    if not text.endswith("\n"):
        text += "\n"
    lines = text.splitlines(keepends=True)
    head = (
        f"diff --git a/{path} b/{path}\n"
        "new file mode 100644\n"
        "--- /dev/null\n"
        f"+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n"
    )
    return (head + "".join(f"+{line}" for line in lines)).encode()


def pull_request_body(config_text: str, reasons: list[str], trigger_label: str) -> str:
    """What the maintainer reads before deciding: what repairbot is, what it
    detected, what merging or closing means."""
    found = "\n".join(f"- {reason}" for reason in reasons) or "- nothing recognisable"
    return (
        "repairbot was installed on this repository. It reproduces a reported bug in a "
        "sandbox, asks a coding agent for a fix, verifies it with your tests, and opens a "
        "draft pull request that waits for your review; it merges only what a person with "
        "write access approved.\n\n"
        f"This pull request proposes `{CONFIG_PATH}`, the repository's settings for it. "
        "**Nothing runs until this file exists**: merge this pull request (edit it first if "
        "the commands are not right), or close it and add the file yourself later.\n\n"
        f"What was detected:\n{found}\n\n"
        f"The proposed file:\n\n```yaml\n{config_text}```\n\n"
        f"Once the file is on the default branch, add the `{trigger_label}` label to an issue "
        "(created for you) or comment `/repair` on it. Put the command that shows the bug in "
        "the file's `reproduce:` setting or in a fenced `repro` block in the issue."
    )
