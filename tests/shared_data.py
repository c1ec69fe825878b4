"""The real GitHub webhook payloads the tests use, carried in this repository.

They are a copy of the steering repository's ``shared/data/github/webhooks``
(octokit/webhooks examples, MIT licence); ``tests/test_self_contained.py``
keeps the copy identical to that set whenever it is within reach.
"""

from __future__ import annotations

from pathlib import Path

WEBHOOK_EXAMPLES = Path(__file__).resolve().parent / "data" / "github" / "webhooks"
