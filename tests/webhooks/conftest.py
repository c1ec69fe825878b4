"""Fixtures for webhook intake tests (helpers live in webhook_examples.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from webhook_examples import example_files, load_example


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``example``: one test per real payload file."""
    if "example" in metafunc.fixturenames:
        files = example_files()
        metafunc.parametrize("example", files, ids=[f"{p.parent.name}.{p.stem}" for p in files])


@pytest.fixture
def payload_of() -> Callable[[str, str], dict[str, Any]]:
    """``payload_of("issues", "labeled")`` -> a fresh dict of that example, free to damage."""
    return load_example
