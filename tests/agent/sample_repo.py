"""A small real repository with a real bug, for workspace, agent and activity tests.

``calc.add`` subtracts. The reproduction asserts ``add(2, 3) == 5`` and the
unittest suite has a failing test; the known fix replaces ``a - b`` with
``a + b``. Imported as ``tests.agent.sample_repo`` (pytest puts the rootdir on ``sys.path``
for the root conftest), so every test directory shares this one copy;
a conftest (or test module) imports ``sample_repo_fixture`` and
``sample_repo_template_fixture`` to offer the ``sample_repo`` fixture.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

CALC = '''"""Arithmetic for the demo project."""


def add(a, b):
    return a - b


def mul(a, b):
    return a * b
'''

TEST_CALC = """import unittest

from calc import add, mul


class CalcTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_mul(self):
        self.assertEqual(mul(2, 3), 6)


if __name__ == "__main__":
    unittest.main()
"""

PYTHON = sys.executable
REPRO_ARGV = [PYTHON, "-c", "from calc import add; assert add(2, 3) == 5, add(2, 3)"]
TEST_ARGV = [PYTHON, "-m", "unittest", "-q"]
FIX_SCRIPT = Path(__file__).resolve().parents[2] / "app" / "demo" / "agents" / "fix_known_bug.py"
FIX_ARGV = [PYTHON, str(FIX_SCRIPT), "--path", "calc.py", "--old", "a - b", "--new", "a + b"]
#: The fix as a patch (what a model would answer).
FIX_DIFF = """diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -2,7 +2,7 @@


 def add(a, b):
-    return a - b
+    return a + b


 def mul(a, b):
"""


def git(cwd: Path, *args: str) -> str:
    env = {
        "PATH": "/usr/bin:/bin:/usr/local/bin",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_AUTHOR_NAME": "Tester",
        "GIT_AUTHOR_EMAIL": "tester@example.com",
        "GIT_COMMITTER_NAME": "Tester",
        "GIT_COMMITTER_EMAIL": "tester@example.com",
    }
    out = subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


@dataclass
class SampleRepo:
    path: Path
    base_sha: str

    @property
    def url(self) -> str:
        return self.path.as_uri()

    def commit(self, files: dict[str, str], message: str = "change") -> str:
        for name, text in files.items():
            target = self.path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        git(self.path, "add", "--all")
        git(self.path, "commit", "--quiet", "-m", message)
        return git(self.path, "rev-parse", "HEAD")


def make_sample_repo(path: Path, extra_files: dict[str, str] | None = None) -> SampleRepo:
    path.mkdir(parents=True)
    git(path, "init", "--quiet", "-b", "main")
    repo = SampleRepo(path=path, base_sha="")
    files = {"calc.py": CALC, "test_calc.py": TEST_CALC, "README.md": "# calc\n"}
    repo.base_sha = repo.commit({**files, **(extra_files or {})}, "calc with a bug")
    return repo


@pytest.fixture(scope="session", name="sample_repo_template")
def sample_repo_template_fixture(tmp_path_factory: pytest.TempPathFactory) -> SampleRepo:
    return make_sample_repo(tmp_path_factory.mktemp("template") / "upstream")


@pytest.fixture(name="sample_repo")
def sample_repo_fixture(tmp_path: Path, sample_repo_template: SampleRepo) -> SampleRepo:
    """A private copy of the sample repository (tests may commit to it)."""
    path = tmp_path / "upstream"
    shutil.copytree(sample_repo_template.path, path, symlinks=True)
    return SampleRepo(path=path, base_sha=sample_repo_template.base_sha)
