"""Where the workers' CPU goes during ``python -m bench.load --profile DIR``.

py-spy samples each worker process from the first label to the last run's
end (``--rate 100 --nonblocking --gil``: the thread holding the GIL, so
waits are left out), writing collapsed stacks to ``DIR/<worker>.txt``. :func:`summary`
folds them into shares of samples: inclusive by part of the worker (a
sample counts for every part on its stack, so parts overlap) and exclusive
by function. Read shares, not times: sampling costs the workers a little
CPU itself, and a machine under load stretches whatever holds the GIL.

``python -m bench.load_profile DIR`` prints the summary of an earlier run.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

#: Parts of a worker, by a substring of a frame (``function (file:line)``).
PARTS: tuple[tuple[str, str], ...] = (
    ("activity bodies (activities/)", "(activities/"),
    ("GitHub REST requests (githubkit)", "githubkit/"),
    ("HTTP transport (httpx, httpcore)", "httpx/"),
    ("subprocess creation and reaping", "(subprocess.py"),
    ("asyncio subprocess plumbing", "asyncio/unix_events.py"),
    ("the engine (app/engine/)", "(app/engine/"),
    ("replay (app/engine/_replay.py)", "(app/engine/_replay.py"),
    ("workflow code (app/workflows/)", "(app/workflows/"),
    ("SQLAlchemy", "sqlalchemy/"),
    ("psycopg", "psycopg/"),
    ("pydantic", "pydantic"),
    ("JSON", "(json/"),
    ("arq", "arq/"),
    ("redis client", "redis/"),
    ("logging", "(logging/"),
    ("evidence (app/evidence/)", "(app/evidence/"),
    ("the sandbox (app/sandbox/)", "(app/sandbox/"),
    ("git plumbing (app/github/gitcmd.py)", "(app/github/gitcmd.py"),
    ("installation tokens (app/github/auth.py)", "(app/github/auth.py"),
    ("cryptography (JWT signing)", "cryptography/"),
    ("in the thread pools (concurrent/futures/thread.py)", "(concurrent/futures/thread.py"),
    ("file system work (shutil, pathlib, tempfile)", "(shutil.py"),
)


def start(pids: dict[str, int], directory: Path) -> list[subprocess.Popen[bytes]]:
    """One py-spy per process, until :func:`stop`."""
    spy = shutil.which("py-spy")
    if spy is None:
        raise SystemExit("--profile needs py-spy: pip install py-spy")
    directory.mkdir(parents=True, exist_ok=True)
    record = [spy, "record", "--rate", "100", "--nonblocking", "--gil", "--format", "raw"]
    return [
        subprocess.Popen(
            [*record, "--output", str(directory / f"{name}.txt"), "--pid", str(pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, pid in pids.items()
    ]


def stop(spies: Iterable[subprocess.Popen[bytes]]) -> None:
    """py-spy writes its file when interrupted."""
    spies = [spy for spy in spies if spy.poll() is None]
    for spy in spies:
        spy.send_signal(signal.SIGINT)
    for spy in spies:
        try:
            spy.wait(timeout=60)
        except subprocess.TimeoutExpired:
            spy.kill()


def read_stacks(directory: Path) -> Counter[tuple[str, ...]]:
    stacks: Counter[tuple[str, ...]] = Counter()
    for path in sorted(directory.glob("*.txt")):
        for line in path.read_text().splitlines():
            frames, _, count = line.rpartition(" ")
            if frames and count.isdigit():
                stacks[tuple(frames.split(";"))] += int(count)
    return stacks


def summary(directory: Path, top: int = 25) -> list[str]:
    stacks = read_stacks(directory)
    total = sum(stacks.values())
    if not total:
        return [f"no samples in {directory}"]
    parts: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for frames, count in stacks.items():
        for name, needle in PARTS:
            if any(needle in frame for frame in frames):
                parts[name] += count
        own[frames[-1]] += count
    lines = [f"{total} samples in {directory}; inclusive shares by part (they overlap):", ""]
    lines += [f"| {name} | {100 * parts[name] / total:.1f}% |" for name, _ in PARTS]
    lines += ["", f"Exclusive shares, top {top} functions:", ""]
    lines += [f"| `{frame}` | {100 * n / total:.1f}% |" for frame, n in own.most_common(top)]
    return lines


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench.load_profile DIR", file=sys.stderr)
        return 2
    print("\n".join(summary(Path(argv[0]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
