"""The worker never trusts a path the sandbox touched: FIFOs, links to
devices, huge files and catastrophic regular expressions are refused or
stopped, never waited on, and never on the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import pytest

from app.agent import CommandAgent
from app.agent.context import ContextBudget, choose_files
from app.agent.files import Checkout, FileRefused
from app.agent.journal import restore_workspace
from app.agent.search import search
from app.agent.tools import Toolbox
from app.checkout import TooLarge, UnsafePath, read_untrusted, read_untrusted_sync
from app.repo_config import Command
from app.sandbox.runner import Sandbox
from app.workspace import Workspace, snapshot
from tests.agent.test_command_agent import request

T = TypeVar("T")
#: A deadline for work that must not block; passing it means the guard is gone.
NEVER = 30.0


async def unblocking(fifo: Path, work: Awaitable[T]) -> T:
    """``work``, or a failure if it blocked on ``fifo`` (then unblock the thread)."""
    try:
        return await asyncio.wait_for(work, NEVER)
    except TimeoutError:
        # Open the FIFO's other end so the blocked thread can finish.
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        pytest.fail(f"reading {fifo} blocked")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "ws" / "repo"
    root.mkdir(parents=True)
    (root / "ok.txt").write_text("fine\n")
    os.mkfifo(root / "pipe")
    os.symlink("/dev/zero", root / "zero")
    return root


async def test_a_fifo_is_refused_not_waited_on(repo: Path) -> None:
    with pytest.raises(UnsafePath, match="not a regular file"):
        await unblocking(repo / "pipe", read_untrusted(repo / "pipe"))


async def test_a_link_to_dev_zero_is_refused(repo: Path) -> None:
    with pytest.raises(UnsafePath, match="symlink"):
        await read_untrusted(repo / "zero")


def test_a_file_over_the_cap_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2000)
    with pytest.raises(TooLarge):
        read_untrusted_sync(big, limit=1000)
    assert read_untrusted_sync(big, limit=2000) == b"x" * 2000


def test_a_device_is_refused_even_without_a_link() -> None:
    with pytest.raises(UnsafePath, match="not a regular file"):
        read_untrusted_sync(Path("/dev/zero"))


async def test_read_file_on_a_fifo_is_an_answer(repo: Path) -> None:
    box = Toolbox(Workspace(repo.parent, "0" * 40), reproduction=[], tests=None, time_limit=5)
    answer = await unblocking(repo / "pipe", box.run("read_file", {"path": "pipe"}))
    assert not answer.ok and "not a regular file" in answer.output


async def test_writing_over_a_fifo_is_refused(repo: Path) -> None:
    with pytest.raises(FileRefused):
        Checkout(repo).write("pipe", b"data")


async def test_file_tools_run_off_the_event_loop(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read that waits for the loop to move proves it runs in a thread.
    loop_moved = asyncio.Event()
    loop = asyncio.get_running_loop()
    real_read = Checkout.read

    def read_after_the_loop_moved(self: Checkout, relative: str) -> bytes:
        asyncio.run_coroutine_threadsafe(asyncio.wait_for(loop_moved.wait(), NEVER), loop).result()
        return real_read(self, relative)

    monkeypatch.setattr(Checkout, "read", read_after_the_loop_moved)
    box = Toolbox(Workspace(repo.parent, "0" * 40), reproduction=[], tests=None, time_limit=5)
    reading = asyncio.ensure_future(box.run("read_file", {"path": "ok.txt"}))
    await asyncio.sleep(0)
    loop_moved.set()
    assert (await reading).output.endswith("fine")


async def test_a_catastrophic_regex_is_stopped_and_the_loop_keeps_running(repo: Path) -> None:
    (repo / "evil.txt").write_text("a" * 40 + "b\n")
    box = Toolbox(
        Workspace(repo.parent, "0" * 40),
        reproduction=[],
        tests=None,
        time_limit=5,
        search_time_limit=1,
    )
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.ensure_future(tick())
    try:
        answer = await asyncio.wait_for(box.run("search", {"pattern": "(a+)+$"}), NEVER)
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
    assert not answer.ok and "did not finish" in answer.output
    assert ticks > 1  # the worker's loop ran while the search was stuck


async def test_search_finds_and_refuses_like_before(repo: Path) -> None:
    ok, text = await search(repo, "fin")
    assert ok and text == "ok.txt:1: fine"
    ok, text = await search(repo, "(")
    assert not ok and "not a valid regular expression" in text


async def test_restoring_a_workspace_never_reads_the_checkouts_git_config(
    tmp_path: Path, workspace: Workspace
) -> None:
    # Setup (repository code) ran before the loop resumes and owns repo/.git.
    baseline = await snapshot(workspace)
    planted = tmp_path / "fsmonitor-ran"
    hook = workspace.repo / ".git" / "hook.sh"
    hook.write_text(f"#!/bin/sh\necho ran > {planted}\n")
    hook.chmod(0o755)
    with (workspace.repo / ".git" / "config").open("a") as fh:
        fh.write(f"[core]\n\tfsmonitor = {hook}\n")
    (workspace.repo / "calc.py").write_text("changed\n")
    await restore_workspace(workspace, baseline, None)
    assert not planted.exists()
    assert "return a" in (workspace.repo / "calc.py").read_text()  # back to the baseline


async def test_a_result_file_that_is_a_fifo_does_not_block_the_worker(
    workspace: Workspace,
) -> None:
    agent = CommandAgent(
        Command(shell='mkfifo "$REPAIRBOT_RESULT_FILE"'),
        time_limit=30,
        sandbox=Sandbox(heartbeat_interval=0.05),
    )
    result = workspace.scratch / "result.json"
    proposal = await unblocking(result, agent.propose(request(workspace)))
    assert proposal.summary == "" and proposal.patch == ""


async def test_a_result_file_linked_to_dev_zero_is_not_read(workspace: Workspace) -> None:
    agent = CommandAgent(
        Command(shell='ln -s /dev/zero "$REPAIRBOT_RESULT_FILE"'),
        time_limit=30,
        sandbox=Sandbox(heartbeat_interval=0.05),
    )
    proposal = await agent.propose(request(workspace))
    assert proposal.summary == ""


async def test_files_shown_to_the_model_skip_a_fifo_setup_planted(workspace: Workspace) -> None:
    (workspace.repo / "calc.py").unlink()
    os.mkfifo(workspace.repo / "calc.py")
    files = await unblocking(
        workspace.repo / "calc.py",
        choose_files(
            workspace,
            failure_text='File "calc.py", line 2',
            other_text="",
            budget=ContextBudget(),
        ),
    )
    assert "calc.py" not in [item.path for item in files]
