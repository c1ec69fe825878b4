"""The built-in agent's ``search`` tool, run in a child process with a deadline.

The model chooses the pattern, and Python's ``re`` backtracks: ``(a+)+$``
against a line of ``a``s followed by ``b`` takes longer than the age of the
universe, holding the GIL, so a thread cannot be interrupted and would
freeze the worker's event loop. The search therefore runs in its own
process (``python -m app.agent.search``, reading the checkout through
:class:`app.agent.files.Checkout`, confined and non-blocking like every
other tool) that the worker kills at the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
from pathlib import Path

from app.agent.files import Checkout, FileRefused

MAX_MATCHES = 200
#: Longest a search may run before it is killed (seconds).
SEARCH_TIME_LIMIT = 10.0
#: Most of the child's answer the worker reads.
MAX_ANSWER_BYTES = 256 * 1024


def search_checkout(root: Path, pattern: str, path: str = ".") -> tuple[bool, str]:
    """(ok, text): the matches of ``pattern`` under ``path`` (runs in the child)."""
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        return False, f"not a valid regular expression: {exc}"
    checkout = Checkout(root)
    matches: list[str] = []
    try:
        for name in checkout.walk(path):
            try:
                data = checkout.read(name)
            except FileRefused:
                continue
            if b"\0" in data[:8000]:
                continue
            for number, line in enumerate(data.decode(errors="replace").splitlines(), 1):
                if regex.search(line):
                    matches.append(f"{name}:{number}: {line.strip()[:300]}")
                    if len(matches) >= MAX_MATCHES:
                        matches.append(f"... (stopped at {MAX_MATCHES} matches)")
                        return True, "\n".join(matches)
    except FileRefused as exc:
        return False, str(exc)
    return True, "\n".join(matches) or "no matches"


async def search(
    root: Path, pattern: str, path: str = ".", *, time_limit: float = SEARCH_TIME_LIMIT
) -> tuple[bool, str]:
    """Run :func:`search_checkout` in a child process; killed after ``time_limit``."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",  # no PYTHON* variables, no user site: only the installed app
        "-m",
        "app.agent.search",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"},
        start_new_session=True,
    )
    request = json.dumps({"root": str(root), "pattern": pattern, "path": path}).encode()
    try:
        out, _ = await asyncio.wait_for(proc.communicate(request), time_limit)
    except TimeoutError:
        return False, (
            f"the search did not finish within {time_limit:g}s and was stopped; "
            "use a simpler pattern (no nested repetition) or a narrower path"
        )
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            # Drain to EOF: the pipes close with the process, not at garbage collection.
            await proc.communicate()
    try:
        answer = json.loads(out[:MAX_ANSWER_BYTES])
        return bool(answer["ok"]), str(answer["text"])
    except (ValueError, KeyError, TypeError):
        return False, f"the search failed (exit status {proc.returncode})"


def main() -> None:
    request = json.loads(sys.stdin.buffer.read())
    ok, text = search_checkout(Path(request["root"]), request["pattern"], request["path"])
    sys.stdout.write(json.dumps({"ok": ok, "text": text}))


if __name__ == "__main__":
    main()
