"""``repairbot demo`` itself runs in CI: the README's main command must work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_demo(*args: str, tmp_path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "app.main.cli", "demo", "--dir", str(tmp_path / "demo"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, f"demo failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.mark.slow
def test_demo_merges_the_fix(tmp_path: Path) -> None:
    out = run_demo(tmp_path=tmp_path)
    assert "outcome merged" in out
    assert "branches by repairbot  0" in out  # deleted after the merge
    assert "pull requests          1  merged: 1" in out
    assert "status comments        1" in out
    assert "time per phase:" in out


@pytest.mark.slow
def test_demo_survives_a_worker_killed_mid_run(tmp_path: Path) -> None:
    out = run_demo("--crash", "--seed", "7", tmp_path=tmp_path)
    assert "worker killed with SIGKILL" in out
    assert "outcome merged" in out
    assert "pull requests          1  merged: 1" in out
    assert "status comments        1" in out


@pytest.mark.slow
def test_demo_with_the_builtin_agent(tmp_path: Path) -> None:
    out = run_demo("--agent", "builtin", tmp_path=tmp_path)
    assert "model (scripted)" in out
    assert (
        "the built-in agent asked the scripted model 7 times (turns [0, 1, 2, 3, 4, 5, 6])" in out
    )
    for tool in ("list_files", "search", "read_file", "replace_in_file", "run_command", "finish"):
        assert f"tool call  {tool}(" in out
    assert "outcome merged" in out
    assert "pull requests          1  merged: 1" in out


@pytest.mark.slow
def test_demo_keep_serves_the_dashboard_until_interrupted(tmp_path: Path) -> None:
    import re
    import signal

    import httpx

    demo = subprocess.Popen(
        [sys.executable, "-m", "app.main.cli", "demo", "--keep", "--dir", str(tmp_path / "d")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert demo.stdout is not None
        seen: list[str] = []
        for line in demo.stdout:  # the demo's own account of where it is
            seen.append(line)
            if line.startswith("  worker log"):
                break
        text = "".join(seen)
        assert "outcome merged" in text and "keeps serving until Ctrl-C" in text, text
        dashboard = re.search(r"dashboard\s+(http://\S+/runs)", text)
        assert dashboard, text
        answer = httpx.get(dashboard.group(1), follow_redirects=False, timeout=10)
        # Not signed in yet: the dashboard sends the browser to sign in.
        assert answer.status_code in (302, 303, 307), answer.text
        assert "sign in            as maya" in text
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=60) == 0
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
