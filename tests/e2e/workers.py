"""The worker of an end-to-end test: the embedded root one, or an unprivileged process.

Issue 19 asks the hostile end-to-end tests to hold under both the root and
the unprivileged worker (the Dockerfile's). The ``worker`` fixture
(tests/e2e/conftest.py, :func:`workers`) is parametrised over both:
``root`` is the stack's in-process worker; ``unprivileged`` is a
``repairbot worker`` process of a throwaway user (tests/unprivileged_user.py)
beside the stack's web app, sharing its PostgreSQL database (another user
cannot open the test's SQLite file, so that combination is skipped) and
taking its jobs from it (no Redis: the reconciler finds them). Its settings
come through the environment and its secrets through an inherited
descriptor, as a deployment starts one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any

import pytest

from app import secrets
from app.demo.stack import LocalStack
from tests.unprivileged_user import PYTHON, UNAVAILABLE, as_user, python_env, throwaway_user


class Worker:
    """Where the worker keeps its files and which Python repository commands use."""

    def __init__(self, kind: str, home: Path, python: str, uid: int | None = None) -> None:
        self.kind, self.home, self.python, self.uid = kind, home, python, uid
        self.log_path = home.parent / f"{home.name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def own(self, path: Path) -> Path:
        """Make ``path`` (a file the worker must read, like its key) the worker's."""
        if self.uid is not None:
            os.chown(path, self.uid, self.uid)
        return path

    def data_dir(self, stack: LocalStack) -> Path:
        assert stack.settings is not None
        return stack.settings.data_dir if self.uid is None else self.home / "data"

    def start(
        self, stack: LocalStack, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> None:
        """repairbot's web app, and this worker, with ``overrides`` to the settings;
        ``environ``: more of the worker process's environment (the embedded
        worker has the test's)."""
        if self.uid is None:
            stack.start_repairbot(**overrides)
            return
        assert stack.settings is not None
        stack.start_repairbot(run_worker=False, **overrides)
        settings = stack.settings.with_overrides(
            data_dir=self.home / "data", worker_id="unprivileged-worker", **overrides
        )
        env = {**python_env(self.home), **(environ or {}), **settings.to_env()}
        for name in settings.secret_names():
            env.pop(name, None)
        fd, named = secrets.handover(settings.secret_env())
        self._log = self.log_path.open("wb")
        try:
            self.process = subprocess.Popen(
                [*as_user(self.uid), PYTHON, "-m", "app.main.cli", "--log-level=INFO", "worker"],
                env={**env, **named},
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.home,
                pass_fds=(fd,),
            )
        finally:
            os.close(fd)

    def logs(self) -> str:
        """What the worker process logged ("" for the embedded worker: caplog has it)."""
        if self._log is None:
            return ""
        return Path(self._log.name).read_text(errors="replace")

    def sandbox_line(self) -> str:
        """How the unprivileged worker's start-up line describes its sandbox."""
        found = re.search(r'"sandbox": "([^"]*)"', self.logs())
        return found.group(1) if found else ""

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log is not None:
            self._log.close()


def workers(request: pytest.FixtureRequest, tmp_path: Path, db_url: str) -> Iterator[Worker]:
    """The ``worker`` fixture's body (``request.param``: root or unprivileged)."""
    if request.param == "root":
        yield Worker("root", tmp_path, sys.executable)
        return
    if UNAVAILABLE:
        pytest.skip(UNAVAILABLE)
    if db_url.startswith("sqlite"):
        pytest.skip("a worker of another user shares the database through PostgreSQL")
    with throwaway_user() as uid, ExitStack() as cleanup:  # the process ends first
        home = Path(tempfile.mkdtemp(prefix="repairbot-worker-"))
        cleanup.callback(shutil.rmtree, home, ignore_errors=True)
        os.chown(home, uid, uid)
        made = Worker("unprivileged", home, PYTHON, uid)
        cleanup.callback(made.log_path.unlink, missing_ok=True)
        cleanup.callback(made.stop)
        yield made
