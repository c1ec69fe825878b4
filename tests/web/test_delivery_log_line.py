"""One INFO line per delivery answered, with its id, event and outcome (issue 22, point 3)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.web.support import example


async def test_each_delivery_gets_one_info_line(web: Any, caplog: pytest.LogCaptureFixture) -> None:
    poster, _ = web
    with caplog.at_level(logging.INFO, "repairbot.web"):
        response = await poster.post("issues", example("issues", "opened"), delivery="d-7")
        await poster.post("issues", example("issues", "opened"), delivery="d-7")
    assert response.status_code == 202
    lines = [r for r in caplog.records if r.name == "repairbot.web"]
    assert [r.levelno for r in lines] == [logging.INFO, logging.INFO]
    first, again = (r.getMessage() for r in lines)
    assert first.startswith("delivery d-7 (issues): 202 issues.opened")
    assert again.startswith("delivery d-7 (issues): 200 delivery d-7 already received")
