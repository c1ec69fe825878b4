"""Where the steering repository's shared data lives (real webhook payloads).

``REPAIRBOT_SHARED_DIR`` if set, else ``../shared`` next to this checkout,
else ``/work/shared``. The payloads are required: tests fail, not skip, when
they are missing."""

from __future__ import annotations

import os
from pathlib import Path

_CANDIDATES = [
    Path(os.environ["REPAIRBOT_SHARED_DIR"]) if os.environ.get("REPAIRBOT_SHARED_DIR") else None,
    Path(__file__).resolve().parents[1].parent / "shared",
    Path("/work/shared"),
]
SHARED = next((p for p in _CANDIDATES if p is not None and p.is_dir()), Path("/work/shared"))
WEBHOOK_EXAMPLES = SHARED / "data" / "github" / "webhooks"
