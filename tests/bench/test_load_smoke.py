"""The load benchmark end to end with tiny numbers: two runs, two workers.
Speed is never asserted; only that every run ended merged exactly once and
that every figure was measured."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.sandbox.hold import HOLD
from bench.load import main, union_length
from bench.load_census.sitecustomize import _endpoint, _program
from tests.conftest import PG_ADMIN_URL, REDIS_URL


def test_union_length_counts_overlaps_once_and_clips() -> None:
    assert union_length([(0, 2), (1, 3), (5, 6)], 0, 10) == 4
    assert union_length([(0, 2), (1, 3), (5, 6)], 1.5, 5.5) == 2
    assert union_length([], 0, 1) == 0


def test_the_census_names_programs_and_endpoints_without_ids() -> None:
    assert _program(["git", "-c", "a=b", "-C", "/x", "fetch", "--quiet", "url"]) == "git fetch"
    assert _program(["/usr/bin/bwrap", "--die-with-parent"]) == "bwrap"
    assert _program([*HOLD, "/usr/bin/bwrap", "--die-with-parent"]) == "bwrap"
    assert _endpoint("/api/v3/repos/octo/slugify-3/issues/12/comments") == (
        "/api/v3/repos/{repo}/issues/{n}/comments"
    )
    assert _endpoint("/api/v3/repos/o/r/git/ref/heads/repairbot/issue-1") == (
        "/api/v3/repos/{repo}/git/ref/{path}"
    )
    assert (
        _endpoint("/api/v3/orgs/octo-repairbot/installation") == "/api/v3/orgs/{org}/installation"
    )


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.timeout(600)
def test_tiny_load_run_reports_every_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "load.json"
    argv = ["--runs", "2", "--workers", "2", "--timeout", "300", "--census", "--idle", "1"]
    argv += ["--warmup", "1"]
    argv += ["--postgres", PG_ADMIN_URL, "--redis", REDIS_URL, "--json", str(out)]
    argv += ["--keep", str(tmp_path / "kept")]
    assert main(argv) == 0, capsys.readouterr().out
    # The census's variables went to the fleet only: a process this test run
    # starts later must not load the hook (and write into a removed directory).
    assert "REPAIRBOT_LOAD_CENSUS" not in os.environ
    assert "load_census" not in os.environ.get("PYTHONPATH", "")

    result = json.loads(out.read_text())
    # --warmup: its run is in no figure (two measured runs, each counted once).
    assert result["warmup"] == 1 and len(result["per_run"]) == 2
    assert result["exact"] == result["completed"] == 2
    assert result["lost"] == [] and result["duplicated"] == []
    assert result["overhead_p95"] is not None and result["overhead_p50"] is not None
    assert 0 <= result["overhead_p50"] <= result["label_to_pr_p50"]
    assert set(result["peak_rss_mib"]) == {"web", "worker-1", "worker-2"}
    assert all(mib > 0 for mib in result["peak_rss_mib"].values())
    assert {"web", "worker-1", "worker-2"} <= set(result["peak_connections_by_process"])
    table = capsys.readouterr().out
    assert "| runs per minute |" in table and "| bot overhead" in table
    # The emulated GitHub's CPU (a process of its own), with git's smart HTTP.
    assert result["emulator_cpu_seconds"][0] > 0
    assert result["postgres_cpu_seconds"] > 0
    assert "| CPU seconds per run: PostgreSQL" in table
    # --idle: each process's CPU per second before the labels.
    assert set(result["idle_cpu"]) == {"web", "worker-1", "worker-2"}
    assert all(cpu >= 0 for cpu in result["idle_cpu"].values()) and result["idle_seconds"] >= 1
    assert "| idle CPU before the labels" in table
    # --census: what each run cost in processes, statements, requests, store calls.
    census = result["census"]
    assert census["database"]["activity workspace.prepare"] == 1
    assert census["database"]["workflow repair"] == 1
    workers = census["workers"]
    assert workers["process git fetch"] > 0 and workers["reconciler pass"] > 0
    # Each worker fetches a run's base once (its object cache: 2), the merge
    # commit is fetched for the confirmation (1) and the fork push fetches
    # the base's whole history (1): 9 a run without the cache.
    assert workers["process git fetch"] <= 4
    # Each worker removed its cache when it stopped. A worker makes its cache
    # on its first fetch, so one that two runs never sent a workspace to has
    # none: at least one cache, and every cache empty.
    caches = sorted((tmp_path / "kept" / "machines").glob("worker-*/git-cache"))
    assert 1 <= len(caches) <= 2 and all(list(cache.iterdir()) == [] for cache in caches)
    assert any(
        key.startswith("http POST /api/v3/app/installations/{n}/access_tokens") for key in workers
    )
    assert any(key.startswith("store ") for key in workers)
    # The children's CPU by program, reaped through wait4: git's and the sandbox's.
    assert workers["child-ms git fetch"] > 0 and workers["child-ms bwrap"] > 0
    assert workers["child-ms all"] >= workers["child-ms git fetch"] + workers["child-ms bwrap"]
    assert any(key.startswith("sql ") for key in census["web"])
    assert "Per run (`--census`)" in table
