"""The engine benchmark runs end to end in its quick form and reports every
case. Speed is never asserted here: only that each case produced a row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.engine import main

pytestmark = [pytest.mark.redis, pytest.mark.timeout(300)]


def test_quick_run_reports_every_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results.json"
    assert main(["--quick", "--json", str(out)]) == 0

    results = json.loads(out.read_text())
    cases = {(r["case"]["system"], r["case"]["dispatch"], r["case"]["n"]) for r in results}
    expected = {
        (system, dispatch, n)
        for n in (10, 100)
        for system, dispatch in (("dbos", "inprocess"), ("ours", "inprocess"), ("ours", "arq"))
    }
    assert cases == expected
    assert all(r["case"]["db"] == "sqlite" for r in results)
    assert all(r["error"] is None and len(r["totals"]) == 1 for r in results)

    table = capsys.readouterr().out
    for dispatch in ("inprocess", "arq"):
        for n in (10, 100):
            assert f"| sqlite | {dispatch} | {n} |" in table
