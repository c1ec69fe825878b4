"""CPU per GitHub request in repairbot's process: ``python -m bench.github_requests``.

Options: ``[--rounds 40] [--db postgres|sqlite] [--profile]``.

A round makes the requests a repair run makes most (issue 24's census): get
the issue, list its comments and edit the status comment (``ensure_comment``,
a listing and an edit), get the pull request, list its reviews, find and
create a check run (``ensure_check_run``), and mint a narrowed installation
token. Everything goes through a real :class:`GitHubClientFactory` built the
way workers build it (``from_settings`` with a database: shared rate budget
and conditional store), against ``python -m emulator`` in a child process,
so the CPU measured (``time.process_time``: this process, every thread) is
repairbot's side only.

Two factories take turns, round by round, so load on the machine hits both
alike: ``budget`` (the product's) and ``no budget`` (the same without the
shared rate budget), which prices the budget's part. ``--profile`` then
runs cProfile over more rounds of the product's factory and prints exclusive
time per library and inclusive time of our layers (shares: cProfile
inflates Python-heavy code; the plain runs are the truth; the budget's SQL
runs in a thread cProfile does not see, hence the A/B).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Engine, event

from app.demo.serve import bind, url_of
from app.demo.stack import spawn_emulator
from app.engine import make_engine
from app.github.auth import AppCredentials, TokenScope
from app.github.checks import CheckRunView, ensure_check_run
from app.github.client import GitHubClientFactory, PooledGitHub
from app.github.comments import ensure_comment
from app.github.conditional import DatabaseConditionalStore
from app.github.markers import OpId
from app.github.rate_budget import RateBudget
from app.github.repos import RepoRef
from app.github.reviews import list_reviews
from app.operations.migrate import upgrade
from bench.databases import fresh_database
from bench.engine import DEFAULT_POSTGRES
from bench.spec import POSTGRES, SQLITE
from emulator.client import EmulatorClient
from emulator.keys import app_key_pair

BASE_PATH = "/api/v3"
REPO = RepoRef("octo", "demo")

#: Exclusive time per library (first matching fragment of the file path).
LIBRARIES: list[tuple[str, str]] = [
    ("githubkit (request build, auth, paginate)", "/githubkit/"),
    ("githubkit_schemas (model classes)", "/githubkit_schemas/"),
    ("pydantic (parsed_data validation)", "/pydantic"),
    ("httpx", "/httpx/"),
    ("httpcore + h11 (HTTP/1.1 on the socket)", "/httpcore/"),
    ("httpcore + h11 (HTTP/1.1 on the socket)", "/h11/"),
    ("anyio / asyncio / selectors (the loop)", "/anyio/"),
    ("anyio / asyncio / selectors (the loop)", "/asyncio/"),
    ("anyio / asyncio / selectors (the loop)", "/selectors.py"),
    ("ssl / socket", "/ssl.py"),
    ("ssl / socket", "/socket.py"),
    ("our code (app/github)", "/app/github/"),
    ("json", "/json/"),
    ("jwt / cryptography (App JWT)", "/jwt/"),
    ("jwt / cryptography (App JWT)", "/cryptography/"),
    ("sqlalchemy", "/sqlalchemy/"),
]
#: Our layers and githubkit's, inclusive: (label, file fragment, function).
LAYERS: list[tuple[str, str, str]] = [
    ("githubkit arequest (everything of a request)", "githubkit/core.py", "_arequest"),
    ("httpx AsyncClient.send", "httpx/_client.py", "send"),
    ("httpx request build (build_request)", "httpx/_client.py", "build_request"),
    ("githubkit auth flow", "githubkit/auth/", "async_auth_flow"),
    ("ConditionalTransport", "app/github/conditional.py", "handle_async_request"),
    ("SharedTransport", "app/github/transport.py", "handle_async_request"),
    ("httpcore pool (the wire)", "httpcore/_async/connection_pool.py", "handle_async_request"),
    ("rate budget before()", "app/github/rate_budget.py", "before"),
    ("rate budget after()", "app/github/rate_budget.py", "after"),
    ("Response.parsed_data (pydantic models)", "githubkit/response.py", "parsed_data"),
    ("githubkit paginator", "githubkit/rest/paginator.py", "__anext__"),
]


@dataclass
class World:
    base_url: str
    app_id: int
    private_key: str
    installation_id: int
    issue: int
    pull: int
    head_sha: str


async def _build_world(url: str, root: Path) -> World:
    private, public = app_key_pair()
    seed = root / "seed"
    seed.mkdir()
    (seed / "README.md").write_text("# demo\n")
    (seed / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    async with EmulatorClient(url, base_path=BASE_PATH) as c:
        await c.create_user("octo")
        await c.create_user("alice", name="Alice", email="alice@example.invalid")
        repo = await c.create_repo_from_folder("octo", "demo", seed)
        await c.set_permission("octo", "demo", "alice", "write")
        app = await c.create_app(name="repairbot", public_key_pem=public)
        installation_id = await c.create_installation(app.id, "octo")
        issue = await c.create_issue(
            "octo", "demo", as_user="alice", title="add subtracts", body="add(1, 2) == -1\n" * 40
        )
        # A thread like a real one: people talking before the bot answers.
        for n in range(6):
            await c.comment(
                "octo", "demo", issue["number"], f"me too ({n})\n" * 20, as_user="alice"
            )
        head = repo["head"]
        await c.push_as(
            "octo",
            "octo",
            "demo",
            "fix",
            {"calc.py": "def add(a, b):\n    return a + b\n"},
            parent=head,
        )
        pull = await c.rest(
            "POST",
            "/repos/octo/demo/pulls",
            as_user="octo",
            body={"title": "Fix add", "head": "fix", "base": "main", "body": "fixes it"},
        )
    return World(
        url + BASE_PATH, app.id, private, installation_id, issue["number"], pull["number"], head
    )


class Counting(httpx.AsyncBaseTransport):
    """The network, counting the requests sent over it."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.sent = 0
        #: What was sent, for the bare-httpx floor to send again.
        self.log: list[tuple[str, str, list[tuple[bytes, bytes]], bytes]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        body = await request.aread()
        self.log.append((request.method, str(request.url), request.headers.raw, body))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _factory(world: World, engine: Engine, *, budget: bool) -> GitHubClientFactory:
    return GitHubClientFactory(
        transport=Counting(),
        base_url=world.base_url,
        credentials=AppCredentials(str(world.app_id), world.private_key),
        conditional=DatabaseConditionalStore(engine),
        budget=RateBudget(engine) if budget else None,
    )


async def one_round(factory: GitHubClientFactory, world: World, n: int, tag: str = "") -> int:
    """The requests of one round; returns how many were sent. ``tag``: a
    variant's own check run, so every variant makes the same requests."""
    gh = factory.for_installation(world.installation_id, repository="octo/demo")
    counter = factory.transport.inner
    assert isinstance(counter, Counting)
    first = counter.sent
    issue = (await gh.rest.issues.async_get(REPO.owner, REPO.name, world.issue)).parsed_data
    assert issue.number == world.issue
    bot = await factory.bot_login()
    # The status comment: a listing, then an edit (a create in the first round).
    await ensure_comment(
        gh, REPO, world.issue, OpId("status", "bench"), f"status {n}", bot_login=bot
    )
    pr = (await gh.rest.pulls.async_get(REPO.owner, REPO.name, world.pull)).parsed_data
    assert pr.number == world.pull
    await list_reviews(gh, REPO, world.pull)
    view = CheckRunView(
        name=f"repairbot{tag}-{n}", title="t", summary=f"round {n}", conclusion="success"
    )
    await ensure_check_run(gh, REPO, world.head_sha, OpId("check", f"bench{tag}-{n}"), view)
    # A token for git, narrowed to the repository; minted every round (a
    # worker mints several per run: 8 in the census).
    await factory._mint(
        TokenScope.of(
            world.installation_id, repository="octo/demo", permissions={"contents": "write"}
        )
    )
    return counter.sent - first


def _parse_cookies(factory: GitHubClientFactory) -> None:
    """The kept httpx clients as they were before ``_NoCookies``: every
    answer's ``Set-Cookie`` handed to a jar that refuses it."""
    clients: list[PooledGitHub[Any]] = [factory.app(), *factory._installations.values()]
    for client in clients:
        assert client._pooled is not None
        client._pooled.cookies = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


async def bare_round(http: httpx.AsyncClient, sent: list[tuple[str, str, Any, bytes]]) -> int:
    """The same HTTP requests through a bare httpx client, bodies read, nothing
    parsed: the floor under githubkit and our layers."""
    for method, url, headers, body in sent:
        response = await http.request(method, url, headers=headers, content=body)
        assert response.status_code < 400, (method, url, response.status_code)
    return len(sent)


async def _warm(factories: list[GitHubClientFactory], world: World) -> None:
    for i, factory in enumerate(factories):
        await one_round(factory, world, 0, f"-{i}")


def _count_reads(engine: Engine) -> Counter[str]:
    counts: Counter[str] = Counter()

    @event.listens_for(engine, "before_cursor_execute")
    def _count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        table = "github_rate_budget" if "github_rate_budget" in statement else "other"
        verb = statement.split(None, 1)[0].upper()
        counts[f"{verb} {table}"] += 1

    return counts


async def measure(world: World, engine: Engine, rounds: int) -> dict[str, tuple[float, int]]:
    """CPU seconds and requests per variant, interleaved round by round."""
    counts = _count_reads(engine)
    variants = {
        "product": _factory(world, engine, budget=True),
        "no budget": _factory(world, engine, budget=False),
        "cookies parsed": _factory(world, engine, budget=True),
    }
    await _warm(list(variants.values()), world)
    _parse_cookies(variants["cookies parsed"])
    counts.clear()
    cpu = dict.fromkeys(variants, 0.0)
    sent = dict.fromkeys(variants, 0)
    product = variants["product"].transport.inner
    assert isinstance(product, Counting)
    bare = httpx.AsyncClient()
    cpu["bare httpx (floor)"], sent["bare httpx (floor)"] = 0.0, 0
    for n in range(1, rounds + 1):
        # The product's requests of the previous round, sent again first or last.
        replay, product.log = list(product.log), []
        start = time.process_time()
        if n > 1:
            sent["bare httpx (floor)"] += await bare_round(bare, replay)
        cpu["bare httpx (floor)"] += time.process_time() - start
        # Rotate which goes first: the first of a round pays more.
        order = list(variants.items())
        shift = n % len(order)
        for i, (name, factory) in enumerate(order[shift:] + order[:shift]):
            start = time.process_time()
            sent[name] += await one_round(factory, world, n, f"-{(i + shift) % len(order)}")
            cpu[name] += time.process_time() - start
    for factory in variants.values():
        await factory.aclose()
    await bare.aclose()
    print(f"SQL statements over {rounds} rounds of every variant: {dict(counts)}")
    return {name: (cpu[name], sent[name]) for name in cpu}


async def profile(world: World, engine: Engine, rounds: int, dump: str | None) -> None:
    factory = _factory(world, engine, budget=True)
    await _warm([factory], world)
    sent = 0
    # CPU of this thread only: waiting for the emulator is not ours.
    prof = cProfile.Profile(time.thread_time)
    prof.enable()
    for n in range(1, rounds + 1):
        sent += await one_round(factory, world, 10_000 + n)
    prof.disable()
    await factory.aclose()
    stats = pstats.Stats(prof)
    if dump:
        stats.dump_stats(dump)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for (_, _, tt, _, _) in raw.values())
    per_lib: Counter[str] = Counter()
    for (path, _, name), (_, _, tt, _, _) in raw.items():
        label = next((lab for lab, frag in LIBRARIES if frag in path), None)
        if label is None:
            label = f"builtin {name}" if path == "~" else "other"
        per_lib[label] += tt
    print(
        f"\ncProfile, {rounds} rounds, {sent} requests: "
        f"{total / sent * 1e3:.2f} ms profiled per request"
    )
    print("exclusive time per library (share of profiled time):")
    for label, tt in per_lib.most_common(25):
        print(f"  {label:55s} {tt / total:6.1%}  {tt / sent * 1e3:6.3f} ms/request")
    print("inclusive time of layers (overlapping):")
    for label, frag, func in LAYERS:
        ct = sum(v[3] for (path, _, name), v in raw.items() if frag in path and name == func)
        print(f"  {label:55s} {ct / total:6.1%}  {ct / sent * 1e3:6.3f} ms/request")


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="repairbot-ghreq-") as tmp:
        root = Path(tmp)
        sock = bind()
        url = url_of(sock)
        proc = await spawn_emulator(root, sock)
        try:
            world = await _build_world(url, root)
            with fresh_database(args.db, admin_url=args.postgres) as db_url:
                upgrade(db_url)
                engine = make_engine(db_url)
                try:
                    before = os.getloadavg()
                    results = await measure(world, engine, args.rounds)
                    after = os.getloadavg()
                    print(
                        f"load {before[0]:.1f} -> {after[0]:.1f}; "
                        f"{args.rounds} rounds each, interleaved"
                    )
                    for name, (cpu, sent) in results.items():
                        print(
                            f"  {name:18s} {cpu / sent * 1e3:6.2f} ms CPU per request "
                            f"({sent} requests)"
                        )
                    if args.profile:
                        await profile(world, engine, args.rounds, args.dump)
                finally:
                    engine.dispose()
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.github_requests", description=__doc__)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--db", choices=(POSTGRES, SQLITE), default=POSTGRES)
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--dump", help="with --profile: write the pstats file here")
    asyncio.run(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
