"""Choosing files for a model, writing the prompt, reading the diff back."""

from __future__ import annotations

from pathlib import Path

from app.agent import AgentRequest
from app.agent.context import ContextBudget, ContextFile, mentioned_paths, select
from app.agent.prompt import user_message
from app.workspace import Workspace

TRACKED = ["src/pkg/core.py", "src/pkg/util.py", "tests/test_core.py", "core.py", "docs/index.md"]


def test_paths_named_in_a_traceback_deepest_first() -> None:
    text = (
        'File "/tmp/ws-1/repo/tests/test_core.py", line 3, in test_x\n'
        'File "/tmp/ws-1/repo/src/pkg/core.py", line 10, in run\n'
        "src/pkg/util.py:44: DeprecationWarning\n"
        "see ./docs/index.md and my_core.py (not ours) and core.pyc\n"
    )
    assert mentioned_paths(TRACKED, text) == [
        "docs/index.md",
        "src/pkg/util.py",
        "src/pkg/core.py",
        "tests/test_core.py",
    ]


def _repo(tmp_path: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    return tmp_path


def test_selection_respects_file_count_and_byte_budgets(tmp_path: Path) -> None:
    repo = _repo(
        tmp_path,
        {
            "big.py": b"x = 1\n" * 2000,  # 12000 bytes, named by the failure
            "tiny.py": b"t = 1\n",
            "small.py": b"s = 1\n" * 10,
            "image.png": b"\x89PNG\0\0" + b"\0" * 10,
            "large.txt": b"y" * 9000,
        },
    )
    tracked = ["big.py", "tiny.py", "small.py", "image.png", "large.txt"]
    budget = ContextBudget(
        max_files=3, total_bytes=20_000, per_file_bytes=5_000, small_file_bytes=4_000
    )
    chosen = select(repo, tracked, failure_text="big.py:3 image.png", other_text="", budget=budget)
    assert [(c.path, c.truncated) for c in chosen] == [
        ("big.py", True),
        ("tiny.py", False),
        ("small.py", False),
    ]
    assert len(chosen[0].text) == 5_000 and chosen[0].size == 12_000
    two = select(repo, tracked, failure_text="", other_text="", budget=ContextBudget(max_files=2))
    assert [c.path for c in two] == ["tiny.py", "small.py"]
    tight = select(
        repo, tracked, failure_text="", other_text="", budget=ContextBudget(total_bytes=10)
    )
    assert [c.path for c in tight] == ["tiny.py"]


async def test_prompt_fences_survive_backticks_in_files(workspace: Workspace) -> None:
    request = AgentRequest(
        workspace=workspace,
        issue_title="t",
        issue_body="b",
        reproduction=["make test"],
        reproduction_output="x" * 20_000 + "THE END",
    )
    files = [ContextFile(path="doc.md", text="```\ncode\n````\n", size=15, truncated=False)]
    message = user_message(request, files)
    assert "`````\n```\ncode\n````\n\n`````" in message
    assert "[... earlier output omitted ...]" in message and message.count("x") < 9_000
    assert "THE END" in message
