"""The hand-offs microbenchmark (bench/handoffs.py) runs in its smallest form
and reports every row, threads started included. CPU is never asserted."""

from __future__ import annotations

import asyncio
import sys

import pytest

from app.main.children import pidfd_works
from bench.handoffs import main


@pytest.mark.skipif(
    sys.version_info >= (3, 12) or not pidfd_works(), reason="measures 3.11's child watchers"
)
def test_a_tiny_run_reports_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    previous = asyncio.get_child_watcher()
    try:
        assert main(["--rounds", "2", "--spawns", "3", "--watches", "3", "--ballast", "1"]) == 0
    finally:
        asyncio.set_child_watcher(previous)
    table = capsys.readouterr().out
    # A thread per child under 3.11's default watcher, none under the pidfd one.
    assert "| spawn | threaded (3.11's default) |" in table
    assert [
        line.rsplit("|", 2)[1].strip() for line in table.splitlines() if "| spawn |" in line
    ] == [
        "1.00",
        "0.00",
    ]
    assert "| quota watch | executor per watch |" in table
    assert "| quota watch | borrowed from WALKERS |" in table
    assert "| no-op call | asyncio.to_thread |" in table
