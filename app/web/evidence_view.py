"""Evidence as the run page shows it: logs as text, patches as a rendered diff.

Artifacts are read through the content-addressed store, which re-hashes what
it reads: an altered file is reported, never shown as evidence.
"""

from __future__ import annotations

from typing import Any

from app.evidence import EvidenceError, EvidenceStore

#: Inline display limit per artifact; the raw link serves the whole thing.
INLINE_BYTES = 64 * 1024


def diff_lines(text: str) -> list[tuple[str, str]]:
    """(css class, line) per line of a unified diff."""
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        if line.startswith(("diff --git", "+++ ", "--- ", "index ", "new file", "deleted file")):
            cls = "file"
        elif line.startswith("@@"):
            cls = "hunk"
        elif line.startswith("+"):
            cls = "add"
        elif line.startswith("-"):
            cls = "del"
        else:
            cls = "ctx"
        out.append((cls, line))
    return out


def shown(store: EvidenceStore, item: dict[str, Any]) -> dict[str, Any]:
    """One evidence entry of a run (``{"label", "ref"}``) ready for the template."""
    ref = item.get("ref") or {}
    view: dict[str, Any] = {
        "label": item.get("label", ""),
        "sha256": ref.get("sha256", ""),
        "size": ref.get("size", 0),
        "kind": ref.get("kind", ""),
        "name": ref.get("name", ""),
        "text": "",
        "diff": None,
        "error": "",
        "truncated": False,
    }
    try:
        data = store.get(view["sha256"])
    except (EvidenceError, ValueError) as exc:
        view["error"] = str(exc)
        return view
    view["truncated"] = len(data) > INLINE_BYTES
    text = data[:INLINE_BYTES].decode("utf-8", errors="replace")
    if view["kind"] == "patch":
        view["diff"] = diff_lines(text)
    else:
        view["text"] = text
    return view


def listed(evidence: list[dict[str, Any]], sha: str) -> bool:
    """Whether ``sha`` is one of this run's artifacts (so the run's access rules apply)."""
    return any((item.get("ref") or {}).get("sha256") == sha for item in evidence)
