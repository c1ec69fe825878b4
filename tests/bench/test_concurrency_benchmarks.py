"""The four concurrency benchmarks of issue 12 end to end at tiny sizes, on
the real services and processes they use. Speed is never asserted: only that
each runs, checks what it measured, and reports its table. Correctness
properties the benchmarks establish (every run completed, every acknowledged
delivery recorded, parked runs hold nothing) are asserted; timings are not."""

from __future__ import annotations

import pytest

from bench import intake, recovery, throughput, waiting
from tests.conftest import PG_ADMIN_URL, REDIS_URL

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]
SERVICES = ["--postgres-url", PG_ADMIN_URL, "--redis-url", REDIS_URL]


@pytest.mark.timeout(300)
def test_throughput_runs_both_systems(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--m", "4", "--workers", "1", "--concurrency", "2", *SERVICES]
    assert throughput.main(argv) == 0
    out = capsys.readouterr().out
    # One row for W=1, M=4 with both systems' figures (each case raised if any
    # workflow did not complete all of its steps).
    row = next(line for line in out.splitlines() if line.startswith("| 1 | 4 |"))
    assert row.count("|") == 9 and "n/a" not in row
    assert "worst ours/DBOS" in out


@pytest.mark.timeout(300)
def test_throughput_census_counts_where_steps_went(capsys: pytest.CaptureFixture[str]) -> None:
    """``--census``: every step of the 4 runs of 10 was completed fused on the
    process that started its run (none sent through Redis, none unfused),
    and each census section is reported for both systems."""
    argv = ["--m", "4", "--workers", "1", "--concurrency", "2", "--census", "--sql-census"]
    assert throughput.main([*argv, *SERVICES]) == 0
    out = capsys.readouterr().out
    ours = out.split("census, ours W=1:", 1)[1].split("census, dbos W=1:", 1)
    process = next(line for line in ours[0].splitlines() if "process 0:" in line)
    assert "sent 0," in process and "fused 40," in process and "unfused 0" in process
    assert "cache_misses 4," in process  # one fresh execution per run, no replay
    for section in ("worker processes' CPU", "PostgreSQL backends' CPU", "xact_commit"):
        assert section in ours[0] and section in ours[1]
    assert "Redis commands (MONITOR)" in ours[0]
    # Every fused commit, the run's close included, is one statement on
    # PostgreSQL (its guard and other writes inside the one CTE statement).
    assert "complete_and_continue: WITH activity_tasks" in ours[0]
    assert "complete_and_continue: UPDATE workflow_runs" not in ours[0]


@pytest.mark.timeout(300)
def test_waiting_runs_hold_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--n", "20", "--signals", "3", "--passes", "3", *SERVICES]
    assert waiting.main(argv) == 0
    out = capsys.readouterr().out
    assert "| parked runs | 2 | 20 |" in out
    assert "| running attempts (leases) | 0 | 0 |" in out
    assert "parked runs hold no lease, no due job, no job in progress: MET" in out
    assert "over 3 signals" in out


@pytest.mark.timeout(300)
def test_recovery_resumes_on_another_worker(capsys: pytest.CaptureFixture[str]) -> None:
    # Short, but with room for a loaded machine: a live worker whose beats are
    # late by the whole silence would have its attempt retried (a third one).
    argv = ["--kills", "1", "--worker-silence", "4", *SERVICES]
    assert recovery.main(argv) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| 1 | 4 |"))
    p50 = float(row.split("|")[3])
    # The next attempt cannot start before the kill; a negative figure would
    # mean the clock or the attempt records were read wrong.
    assert p50 > 0


@pytest.mark.timeout(300)
def test_intake_records_every_acknowledged_delivery(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--db", "sqlite", "--seconds", "1", "--steady-seconds", "1", "--rate", "20"]
    assert intake.main([*argv, *SERVICES]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| sqlite |"))
    # Every answer was 202 (the count of recorded deliveries is checked
    # against the 2xx answers inside the benchmark, which raises otherwise).
    answers = row.split("|")[-2].strip()  # the last column
    assert answers.endswith("x202") and "," not in answers
    # The durable floor was measured beside it (its own recorded-count check
    # also runs inside the benchmark) and its ratio is in the row.
    cells = [cell.strip() for cell in row.split("|")]
    assert float(cells[3]) > 0 and cells[4].endswith("x")


@pytest.mark.timeout(300)
def test_drift_budget_counts_what_github_counts(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import drift_budget

    assert drift_budget.main(["--runs", "4", "--hours", "3", "--changes", "0.5"]) == 0
    rows = {
        line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
        for line in capsys.readouterr().out.splitlines()
        if line.startswith(("| plain", "| conditional"))
    }
    plain, conditional = rows["plain"], rows["conditional"]
    # The same checks in both modes; every plain read is counted, the
    # conditional ones only when GitHub had something new to say.
    assert plain[1] == conditional[1] and int(plain[2]) == int(plain[3]) > 0
    assert int(conditional[3]) < int(plain[3])
    # Every change was seen by the next check, in both modes.
    for row in (plain, conditional):
        seen, made = row[-1].split(" / ")
        assert seen == made and int(made) > 0
