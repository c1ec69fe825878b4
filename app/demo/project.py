"""The demo repository: a small library with a real bug and a failing test."""

from __future__ import annotations

import json
import sys
from pathlib import Path

LIBRARY = '''"""Turn titles into URL slugs."""

import re


def slugify(text: str) -> str:
    """Lower-case words joined by single hyphens: "Hello, World!" -> "hello-world"."""
    words = re.split(r"[^a-z0-9]+", text.lower())
    return "-".join(words)
'''

EXISTING_TESTS = """import unittest

from slugify import slugify


class TestSlugify(unittest.TestCase):
    def test_plain_words(self):
        self.assertEqual(slugify("hello world"), "hello-world")

    def test_numbers_stay(self):
        self.assertEqual(slugify("Python 3 11"), "python-3-11")


if __name__ == "__main__":
    unittest.main()
"""

FAILING_TEST = '''import unittest

from slugify import slugify


class TestPunctuation(unittest.TestCase):
    """Issue #1: punctuation at the ends leaves stray hyphens."""

    def test_no_leading_or_trailing_hyphens(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")
        self.assertEqual(slugify("  -- Durable workflows --  "), "durable-workflows")


if __name__ == "__main__":
    unittest.main()
'''

BUGGY_LINE = 'return "-".join(words)'
FIXED_LINE = 'return "-".join(word for word in words if word)'
ISSUE_TITLE = "slugify leaves stray hyphens around punctuation"
ISSUE_BODY = (
    '`slugify("Hello, World!")` returns `"hello-world-"` instead of `"hello-world"`.\n\n'
    "The failing test is `tests/test_punctuation.py`."
)


def write_project(
    folder: Path, *, python: str = sys.executable, on_base_moved: str | None = None
) -> Path:
    """Write the demo repository's files into ``folder`` (not a git repo yet).

    ``on_base_moved`` (``reverify`` or ``rereview``) is written into the config
    when given; without it the repository keeps repairbot's default.
    """
    (folder / "slugify").mkdir(parents=True, exist_ok=True)
    (folder / "tests").mkdir(exist_ok=True)
    (folder / ".github").mkdir(exist_ok=True)
    (folder / "slugify" / "__init__.py").write_text(LIBRARY)
    (folder / "tests" / "__init__.py").write_text("")
    (folder / "tests" / "test_slugify.py").write_text(EXISTING_TESTS)
    (folder / "tests" / "test_punctuation.py").write_text(FAILING_TEST)
    (folder / "README.md").write_text("# slugify\n\nTurn titles into URL slugs.\n")
    # The interpreter is named by absolute path: repository commands run with a
    # scrubbed environment, where a version manager's shims may not resolve.
    config = (
        "# How repairbot works on this repository.\n"
        f"reproduce: [{json.dumps(python)}, -m, unittest, tests.test_punctuation, -v]\n"
        f"test: [{json.dumps(python)}, -m, unittest, discover, -s, tests, -t, ., -v]\n"
        "budgets: {repair_attempts: 3, time_limit_seconds: 120}\n"
        "merge_method: squash\n"
    )
    if on_base_moved is not None:
        config += f"on_base_moved: {on_base_moved}\n"
    (folder / ".github" / "repairbot.yml").write_text(config)
    return folder


def fix_agent_command(
    *,
    wrong_first: bool = False,
    python: str = sys.executable,
    new: str = FIXED_LINE,
    on_review: tuple[str, str, str] | None = None,
    sleep: float = 0.0,
) -> list[str]:
    """A real command agent (app/demo/agents/fix_known_bug.py, in the wheel too) told the fix.

    ``new`` replaces the buggy line (a wrong one makes every attempt fail
    verification); ``on_review`` is a further (path, old, new) replacement
    the agent makes only when a review asked for changes; ``sleep`` makes it
    think that many seconds first.
    """
    script = Path(__file__).resolve().parent / "agents" / "fix_known_bug.py"
    if not script.exists():
        raise FileNotFoundError(f"the demo's command agent is missing: {script}")
    argv = [python, str(script), "--path", "slugify/__init__.py"]
    argv += ["--old", BUGGY_LINE, "--new", new]
    if wrong_first:
        argv += ["--wrong-first", 'return "-".join(words).strip()']
    if on_review is not None:
        argv += ["--on-review", *on_review]
    if sleep:
        argv += ["--sleep", str(sleep)]
    return argv
