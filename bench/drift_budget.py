"""Waiting runs against GitHub's rate limit: what drift checks cost an
installation over a simulated day, with and without conditional requests.

    python -m bench.drift_budget [--runs 1000] [--full] [--hours 24]
                                 [--interval 600] [--changes 0.02]

One installation on an in-process emulated GitHub (which answers
``If-None-Match`` with ``304 Not Modified`` and does not count those, as
GitHub does) holds ``--runs`` issues, each with an open pull request: the
runs waiting for review (``--full``: 10,000). Each run re-reads GitHub on the
drift-check schedule of ``app/workflows/repair_review.py``: every
``--interval`` seconds, the interval doubling while nothing changed, up to 16
times; the runs' phases are spread over the first interval. A check makes the
REST reads of the ``github.observe`` activity, through the same library calls
and a real ``GitHubClientFactory``: the issue, the pull request, its reviews,
the issue's comments (the branch is read with ``git ls-remote``, which is not
counted against the REST limit, and is left out here).

Time is simulated: checks run one after another in the order of their
simulated times, and each counted request is put in the simulated hour of its
check (what GitHub counts, every answer but a 304, is counted here beside the
emulator), so a day takes minutes. The emulator's own clock is left alone
(the App's JWT and installation tokens carry real times); its rate counter
starts a new window at each simulated hour. The shared rate budget is left
out here (it would wait for real resets); tests/github/test_gh_conditional.py
covers it.
Meanwhile ``--changes`` of the runs get a human comment at a random moment
(seeded), and each change must be seen by the run's next check (the answer
that follows a change is a full 200, never a stored copy).

Two modes on the same emulator, one after the other: ``plain`` (every read
a full request) and ``conditional`` (the factory revalidates with stored
``ETag``s in a database, as workers do).
Reported per mode: requests sent, requests counted against the limit, the
first hour (every run's first check finds nothing stored), the busiest later
hour, as a share of the 5,000-an-hour limit, and changes detected.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from app.engine._db import make_engine
from app.github.auth import AppCredentials
from app.github.client import GitHubClientFactory
from app.github.conditional import DatabaseConditionalStore, revalidating
from app.github.merge import read_pull
from app.github.repos import RepoRef
from app.operations.migrate import upgrade
from bench.environment import at_start, heading, load
from emulator.app import Emulator
from emulator.client import EmulatorClient
from emulator.keys import app_key_pair

BASE_PATH = "/api/v3"
LIMIT = 5000
GOAL = 0.10
MAX_FACTOR = 16
OWNER, REPO = "octo", "waiting"


@dataclass
class Figures:
    mode: str
    checks: int = 0
    sent: int = 0
    counted: int = 0
    #: Counted requests per simulated hour.
    hours: Counter[int] = field(default_factory=Counter)
    changes: int = 0
    detected: int = 0

    @property
    def later_peak(self) -> int:
        return max((n for hour, n in self.hours.items() if hour > 0), default=0)


class Counting(httpx.AsyncBaseTransport):
    """Under the factory: counts what reaches GitHub, and what GitHub counts
    (every answer but a 304; token mints are the App's, not the installation's)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, figures: Callable[[], Figures]) -> None:
        self.inner, self.figures, self.hour = inner, figures, 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        path = request.url.path
        if not path.endswith("/access_tokens") and path != f"{BASE_PATH}/app":
            f = self.figures()
            f.sent += 1
            if response.status_code != 304:
                f.counted += 1
                f.hours[self.hour] += 1
        return response


def schedule(runs: int, interval: float, horizon: float) -> list[tuple[float, int, int]]:
    """``(time, run, check number)`` of every drift check within ``horizon``."""
    heap: list[tuple[float, int, int]] = []
    for run in range(runs):
        offset = interval * run / runs
        heapq.heappush(heap, (offset + interval, run, 1))
    out = []
    while heap:
        at, run, n = heapq.heappop(heap)
        if at >= horizon:
            continue
        out.append((at, run, n))
        wait = interval * min(MAX_FACTOR, 2**n)
        heapq.heappush(heap, (at + wait, run, n + 1))
    return out


async def setup(emu: Emulator, client: EmulatorClient, runs: int) -> tuple[int, str, list[int]]:
    """The installation, its repository and ``runs`` (issue, pull request) pairs."""
    await client.create_user(OWNER)
    await client.create_user("maya")
    seed = Path(tempfile.mkdtemp(prefix="drift-seed-"))
    (seed / "README.md").write_text("# waiting\n")
    await client.create_repo_from_folder(OWNER, REPO, seed)
    await client.set_permission(OWNER, REPO, "maya", "write")
    private, public = app_key_pair()
    app = await client.create_app(name="repairbot", public_key_pem=public)
    installation = await client.create_installation(app.id, OWNER)
    pushed = await client.push_as("maya", OWNER, REPO, "proposal", {"fix.txt": "fixed\n"})
    sha = pushed["sha"]
    numbers = []
    for run in range(runs):
        await client.rest(
            "POST",
            f"/repos/{OWNER}/{REPO}/git/refs",
            as_user="maya",
            body={"ref": f"refs/heads/repairbot/issue-{run}", "sha": sha},
        )
        issue = await client.create_issue(
            OWNER, REPO, as_user="maya", title=f"Bug {run}", body="It breaks."
        )
        pull = await client.rest(
            "POST",
            f"/repos/{OWNER}/{REPO}/pulls",
            as_user="maya",
            body={
                "title": f"Fix {run}",
                "head": f"repairbot/issue-{run}",
                "base": "main",
                "body": "draft",
                "draft": True,
            },
        )
        numbers.append(int(issue["number"]))
        _PULLS[int(issue["number"])] = int(pull["number"])
    return installation, private, numbers


async def simulate(
    emu: Emulator,
    people: EmulatorClient,
    mode: str,
    installation: int,
    app: tuple[int, str],
    issues: list[int],
    args: argparse.Namespace,
    database: str,
) -> Figures:
    figures = Figures(mode)
    horizon = args.hours * 3600.0
    checks = schedule(len(issues), args.interval, horizon)
    counting = Counting(httpx.ASGITransport(app=emu.asgi()), lambda: figures)
    engine = make_engine(database) if mode == "conditional" else None
    factory = GitHubClientFactory(
        base_url=f"http://emulator{BASE_PATH}",
        credentials=AppCredentials(str(app[0]), app[1]),
        transport=counting,
        conditional=DatabaseConditionalStore(engine) if engine else None,
    )
    gh = factory.for_installation(installation)
    repo = RepoRef(OWNER, REPO)
    rng = random.Random(7)
    changed = set(rng.sample(range(len(issues)), int(len(issues) * args.changes)))
    change_at = {run: rng.uniform(args.interval, horizon * 0.9) for run in changed}
    pending: dict[int, float] = {}  # run -> when its change happened, until seen
    for at, run, _n in checks:
        if int(at // 3600) != counting.hour:
            emu.rate.reset()  # GitHub's next window (see the module's docstring)
        counting.hour = int(at // 3600)
        if run in change_at and change_at[run] <= at:
            number = issues[run]
            await people.comment(OWNER, REPO, number, f"still broken ({run})", as_user="maya")
            pending[run] = change_at.pop(run)
            figures.changes += 1
        number = issues[run]
        with revalidating():  # as the github.observe activity reads
            await gh.rest.issues.async_get(OWNER, REPO, number)
            await read_pull(gh, repo, _PULLS[number])
            await gh.rest.pulls.async_list_reviews(OWNER, REPO, _PULLS[number], per_page=100)
            # The status comment's search (``find_comments``) lists the comments: one request.
            listed = await gh.rest.issues.async_list_comments(OWNER, REPO, number, per_page=100)
        comments: list[dict[str, object]] = listed.raw_response.json()
        bodies = [str(comment.get("body") or "") for comment in comments]
        if run in pending and any(f"still broken ({run})" in body for body in bodies):
            figures.detected += 1
            del pending[run]
        figures.checks += 1
    await factory.aclose()
    if engine is not None:
        engine.dispose()
    return figures


#: Each run's pull request number, by its issue number.
_PULLS: dict[int, int] = {}


def table(results: Sequence[Figures], runs: int, hours: float) -> str:
    lines = [
        "| mode | runs | checks | requests sent | counted | first hour (cold) "
        "| busiest later hour | of the 5,000/h limit | changes seen / made |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for f in results:
        lines.append(
            f"| {f.mode} | {runs} | {f.checks} | {f.sent} | {f.counted} | {f.hours[0]} "
            f"| {f.later_peak} | {f.later_peak / LIMIT:.1%} | {f.detected} / {f.changes} |"
        )
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> list[Figures]:
    with tempfile.TemporaryDirectory(prefix="drift-budget-") as tmp:
        # One caller, one request at a time: the handlers run on the loop.
        emu = Emulator(
            root=Path(tmp) / "emu",
            base_path=BASE_PATH,
            sender=lambda *a: (202, ""),
            threaded=False,
        )
        try:
            async with EmulatorClient(
                "http://emulator",
                base_path=BASE_PATH,
                transport=httpx.ASGITransport(app=emu.asgi()),
            ) as people:
                started = time.monotonic()
                installation, private, issues = await setup(emu, people, args.runs)
                app_id = next(iter(emu.store.apps))
                print(
                    f"  set up {args.runs} runs in {time.monotonic() - started:.0f}s",
                    file=sys.stderr,
                )
                database = f"sqlite:///{Path(tmp) / 'repairbot.db'}"
                upgrade(database)
                results = []
                for mode in args.modes:
                    # Each mode from a fresh window: the emulator counts by its
                    # wall clock, and this benchmark packs days into minutes.
                    emu.rate.reset()
                    started = time.monotonic()
                    figures = await simulate(
                        emu, people, mode, installation, (app_id, private), issues, args, database
                    )
                    print(
                        f"  {mode}: {figures.checks} checks in "
                        f"{time.monotonic() - started:.0f}s, load {load()}",
                        file=sys.stderr,
                    )
                    results.append(figures)
                return results
        finally:
            emu.close()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m bench.drift_budget", description=__doc__)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--full", action="store_true", help="10,000 waiting runs")
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--interval", type=float, default=600.0, help="drift_check_seconds")
    parser.add_argument("--changes", type=float, default=0.02, help="share of runs changed")
    parser.add_argument(
        "--modes", nargs="+", choices=["plain", "conditional"], default=["plain", "conditional"]
    )
    args = parser.parse_args(argv)
    if args.full:
        args.runs = 10_000
    start = at_start()
    results = asyncio.run(run(args))
    print(heading("bench.drift_budget", argv, start) + "\n")
    print(table(results, args.runs, args.hours))
    print()
    for f in results:
        share = f.later_peak / LIMIT
        verdict = "MET" if share < GOAL else "NOT MET"
        print(
            f"{f.mode}: busiest hour after the first {f.later_peak} requests = {share:.1%} "
            f"of the limit -> < {GOAL:.0%} {verdict}; changes seen {f.detected}/{f.changes}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
