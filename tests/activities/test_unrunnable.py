"""cannot_run: a command that could not run is told from one that failed."""

from __future__ import annotations

import pytest

from activities.unrunnable import cannot_run
from app.repo_config import Command
from app.sandbox.runner import CommandResult


def result(command: Command, exit_code: int, output: str = "", **extra: object) -> CommandResult:
    fields: dict[str, object] = {
        "command": command,
        "exit_code": exit_code,
        "duration_seconds": 0.1,
        "timed_out": False,
        "total_bytes": len(output),
        "truncated": False,
        "output_head": "",
        "output_tail": output,
    }
    return CommandResult.model_validate(fields | extra)


PYTEST = Command(shell="python -m pytest -q tests/test_bug.py")


@pytest.mark.parametrize(
    ("command", "code", "output", "says"),
    [
        (Command.of(["nosuchtool"]), 127, "", "could not be found"),
        (Command(shell="./run.sh"), 126, "", "could not be executed"),
        (PYTEST, 4, "error: unrecognized arguments: --seed", "usage error"),
        (PYTEST, 5, "no tests ran in 0.01s", "collected no tests"),
        (PYTEST, 3, "INTERNALERROR>", "internal error"),
        (PYTEST, 2, "ERROR collecting tests/test_bug.py\n1 error during collection", "collected"),
        (Command.of(["py.test"]), 4, "", "usage error"),
        (
            Command.of(["python", "-m", "pytest"]),
            1,
            "/usr/bin/python: No module named pytest",
            "`pytest` is not installed",
        ),
        (
            Command.of(["python", "-m", "unittest"]),
            1,
            "ImportError: Failed to import test module: test_bug",
            "could not import",
        ),
    ],
)
def test_commands_that_cannot_run(command: Command, code: int, output: str, says: str) -> None:
    why = cannot_run(result(command, code, output))
    assert why is not None and says in why


@pytest.mark.parametrize(
    ("command", "code", "output"),
    [
        (PYTEST, 1, "FAILED tests/test_bug.py::test_add - assert -1 == 5"),
        (PYTEST, 0, ""),
        # Exit 4 or 5 from a program that is not pytest is an ordinary failure.
        (Command.of(["make", "check"]), 4, ""),
        (Command.of(["./check.sh"]), 5, ""),
        # Exit 2 from pytest without a collection error (interrupted): not a config mistake.
        (PYTEST, 2, "KeyboardInterrupt"),
        # An AssertionError that mentions an import is still the bug failing.
        (Command.of(["python", "-c", "import x"]), 1, "AssertionError: ImportError expected"),
    ],
)
def test_commands_that_ran(command: Command, code: int, output: str) -> None:
    assert cannot_run(result(command, code, output)) is None


def test_a_timeout_ran() -> None:
    assert cannot_run(result(PYTEST, -9, "", timed_out=True)) is None
