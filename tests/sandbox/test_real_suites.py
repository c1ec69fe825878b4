"""What ordinary test suites need works inside the sandbox, with each backend.

Real repositories' tests use ``multiprocessing`` (POSIX semaphores in
``/dev/shm``), ``concurrent.futures`` process pools, temporary files,
subprocesses, random bytes, a UTF-8 locale and time zones. Each check runs
as the sandbox user (``nobody`` under a root worker), like a real suite.
"""

from __future__ import annotations

import os
import sys
import textwrap

import pytest

from app.repo_config import Command
from app.sandbox.runner import run_command
from app.workspace import Workspace
from tests.sandbox.conftest import Worker

pytestmark = pytest.mark.anyio

PROGRAMS = {
    "multiprocessing-pool": """
        import multiprocessing
        with multiprocessing.Pool(2) as pool:
            assert pool.map(abs, [-1, -2, 3]) == [1, 2, 3]
        lock = multiprocessing.Lock()
        with lock:
            pass
    """,
    "process-pool-executor": """
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(max_workers=2) as pool:
            assert list(pool.map(abs, [-4, 5])) == [4, 5]
    """,
    "tempfile-and-home": """
        import os, pathlib, tempfile
        with tempfile.NamedTemporaryFile() as fh:
            fh.write(b"x")
        with tempfile.TemporaryDirectory() as d:
            pathlib.Path(d, "f").write_text("y")
        pathlib.Path(os.environ["HOME"], ".cache", "x").parent.mkdir(parents=True)
        pathlib.Path("/tmp/scratch").write_text("z")
    """,
    "subprocess": """
        import subprocess, sys
        out = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True)
        assert out.stdout.strip() == b"42", out
        assert subprocess.run(["sh", "-c", "echo hi > /dev/null"]).returncode == 0
    """,
    "devices": """
        import os
        assert len(os.urandom(32)) == 32
        with open("/dev/urandom", "rb") as fh:
            assert len(fh.read(8)) == 8
        with open("/dev/null", "w") as fh:
            fh.write("gone")
    """,
    "locale-and-timezone": """
        import locale, zoneinfo, datetime
        locale.setlocale(locale.LC_ALL, "")
        assert locale.getpreferredencoding(False).lower().replace("-", "") == "utf8"
        tz = zoneinfo.ZoneInfo("Europe/Paris")
        assert datetime.datetime(2024, 7, 1, tzinfo=tz).utcoffset().total_seconds() == 7200
    """,
    "processes-and-open-files": """
        import os, resource, subprocess, sys
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        assert soft >= 1024, soft
        files = [open(os.devnull) for _ in range(900)]
        children = [subprocess.Popen([sys.executable, "-c", "pass"]) for _ in range(20)]
        assert all(child.wait() == 0 for child in children)
    """,
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
async def test_what_test_suites_need_works(worker: Worker, workspace: Workspace, name: str) -> None:
    program = textwrap.dedent(PROGRAMS[name])
    run = await run_command(
        Command.of([sys.executable, "-c", program]),
        cwd=workspace.repo,
        home=workspace.home,
        tmpdir=workspace.tmp,
        time_limit=60,
        sandbox=worker.sandbox,
    )
    assert run.result.exit_code == 0, run.output.decode(errors="replace")
    assert run.result.sandbox != "none"


async def test_a_program_the_sandbox_hides_is_reported_missing(
    worker: Worker, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found on the worker's PATH, absent inside: exit 127 and a clear line, not
    bubblewrap's exit 1 (which would count as a reproduced bug)."""
    tools = worker.data_dir / "tools"
    tools.mkdir()
    program = tools / "onlyonworker"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    run = await run_command(
        Command.of(["onlyonworker", "--check"]),
        cwd=workspace.repo,
        home=workspace.home,
        tmpdir=workspace.tmp,
        time_limit=30,
        sandbox=worker.sandbox,
    )
    assert run.result.exit_code == 127
    assert b"`onlyonworker` is not available inside the sandbox" in run.output
    assert str(tools).encode() not in run.output
