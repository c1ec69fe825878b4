"""The GitHub-request benchmark runs end to end in a short form and reports
every variant and every layer. Speed is never asserted here."""

from __future__ import annotations

import pytest

from bench.github_requests import LAYERS, main

pytestmark = [pytest.mark.timeout(300)]


def test_short_run_reports_every_variant_and_layer(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--rounds", "3", "--db", "sqlite", "--profile"])
    out = capsys.readouterr().out
    for variant in ("product", "no budget", "cookies parsed", "bare httpx (floor)"):
        assert f"  {variant} " in out
    assert "ms CPU per request" in out
    for label, _, _ in LAYERS:
        assert label in out
