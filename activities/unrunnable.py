"""Telling a command that could not run from one that ran and failed.

On the base commit a failing reproduction means "the bug is there", but only
if the command actually ran: "command not found", a usage error, a test file
that does not import or a test selection that matches nothing also exit
non-zero, and counting those as a reproduced bug sends the agent chasing a
config mistake. :func:`cannot_run` recognises them from the exit status and
pytest's and unittest's own conventions, and says why in a sentence.
"""

from __future__ import annotations

import re

from app.sandbox.runner import CommandResult

#: pytest's documented exit codes for "the tests could not be run".
_PYTEST_EXITS = {
    3: "pytest hit an internal error",
    4: "pytest was called wrongly (a usage error such as an unrecognized option, often "
    "an option of a plugin that `setup` does not install)",
    5: "pytest collected no tests (a path or `-k` selection that matches nothing)",
}
_PYTEST = re.compile(r"(^|[\s/])(py\.test|pytest)(\s|$)")
#: Lines that show the test files could not even be imported.
_COLLECTION = (
    re.compile(r"\b\d+ errors? during collection\b"),
    re.compile(r"^ERROR collecting ", re.MULTILINE),
)
_UNITTEST_IMPORT = re.compile(r"^ImportError: Failed to import test module", re.MULTILINE)
_NO_MODULE = re.compile(r"No module named '?(pytest|unittest)'?")


def cannot_run(result: CommandResult) -> str | None:
    """Why ``result``'s command did not really run (a sentence), or None if it did."""
    if result.quota_exceeded is not None:
        return f"it was stopped: {result.quota_exceeded}"
    if result.timed_out or result.exit_code == 0:
        return None
    program = result.command.to_argv()[0]
    if result.exit_code == 127:
        return f"`{program}` could not be found (command not found, or a missing interpreter)"
    if result.exit_code == 126:
        return f"`{program}` could not be executed (not executable)"
    output = result.output_head + result.output_tail
    missing = _NO_MODULE.search(output)
    if missing is not None:
        return f"`{missing.group(1)}` is not installed where the command runs"
    if _looks_like_pytest(result):
        if result.exit_code in _PYTEST_EXITS:
            return _PYTEST_EXITS[result.exit_code]
        if any(pattern.search(output) for pattern in _COLLECTION):
            return "the test files could not be collected (an import or syntax error)"
    if _UNITTEST_IMPORT.search(output):
        return "unittest could not import a test module"
    return None


def _looks_like_pytest(result: CommandResult) -> bool:
    return _PYTEST.search(result.command.display()) is not None
