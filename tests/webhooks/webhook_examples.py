"""The real example payloads (octokit/webhooks), as they are on disk: read-only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.shared_data import WEBHOOK_EXAMPLES

#: ``<X-GitHub-Event>/<action>.json``.
EXAMPLES = WEBHOOK_EXAMPLES


def example_files() -> list[Path]:
    return sorted(EXAMPLES.glob("*/*.json"))


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_bytes())
    return data


def load_example(event: str, action: str) -> dict[str, Any]:
    return load(EXAMPLES / event / f"{action}.json")
