"""Group commit: deliveries that queue while a transaction runs are recorded
and handled together in the next one, each answered after it commits; a
duplicate or a failing handler in the group affects only itself; a group
whose transaction fails is recorded one delivery at a time.

To make a group form for certain, the tests hold the deliveries table
against writers from another connection (SQLite: the write lock; PostgreSQL:
``LOCK TABLE``), so the first delivery's transaction waits, and the next ones
queue behind it; then they let go.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, event, func, select, text

from app.app_tables import WebhookDelivery
from app.config import Settings
from app.engine._registry import Registry
from app.engine._runtime import Runtime
from app.engine._store.schema import runs
from app.intake.pipeline import Intake, IntakeResult
from app.web import create_app
from app.web.group_commit import (
    POSTGRES_WRITERS,
    SQLITE_CHECKPOINT_EVERY,
    GroupCommit,
    record_together,
)
from app.webhooks.routing import HandlerContext, Router
from app.webhooks.signature import sign
from handlers import build_router
from tests.web.support import SECRET, STAND_INS, Poster, example

table = WebhookDelivery.__table__  # type: ignore[attr-defined]

#: An event no handler takes (recorded as ignored).
STAR = {"action": "created", "sender": {"login": "octo", "id": 1}}

#: A ``ping`` handler that starts a run and then fails: its run must vanish.
failing = Router()


@failing.on("ping")
def start_then_fail(event: Any, ctx: HandlerContext) -> None:
    ctx.start("repair", f"doomed-{ctx.delivery_id}", {})
    raise RuntimeError("handler bug")


@pytest.fixture
async def app(db_engine: Engine) -> AsyncIterator[tuple[Poster, GroupCommit]]:
    settings = Settings(github_webhook_secret=SECRET, trigger_label="repairbot")
    runtime = Runtime(db_engine, Registry.of(STAND_INS))
    web = create_app(settings, runtime, router=Router(build_router(), failing))
    writer = web.state.intake_writer
    # One writer, so that what queues behind the first delivery forms one
    # group on PostgreSQL too (its several writers: test_writers_at_once).
    writer.writers = 1
    transport = httpx.ASGITransport(app=web)
    async with httpx.AsyncClient(transport=transport, base_url="http://repairbot") as client:
        yield Poster(client, SECRET), writer


@contextmanager
def writers_held(engine: Engine) -> Iterator[None]:
    """No other connection can write a delivery until the block ends."""
    with engine.connect() as conn:
        tx = conn.begin()  # SQLite: BEGIN IMMEDIATE, the write lock (app/engine/_db.py)
        if conn.dialect.name == "postgresql":
            conn.execute(text("LOCK TABLE webhook_deliveries IN EXCLUSIVE MODE"))
        try:
            yield
        finally:
            tx.rollback()


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in 5 s")


@asynccontextmanager
async def grouped(
    writer: GroupCommit, engine: Engine, poster: Poster
) -> AsyncIterator[Callable[..., asyncio.Task[httpx.Response]]]:
    """Posts made inside the block wait in one group behind a first delivery
    (answered 202 before the group's); the group goes when the block ends."""
    posted: list[asyncio.Task[httpx.Response]] = []

    def post(*args: Any, **kwargs: Any) -> asyncio.Task[httpx.Response]:
        task = asyncio.create_task(poster.post(*args, **kwargs))
        posted.append(task)
        return task

    with writers_held(engine):
        first = asyncio.create_task(poster.post("star", STAR, delivery="first"))
        await until(lambda: writer.in_transaction == 1)
        yield post
        await until(lambda: writer.waiting == len(posted))
    assert (await first).status_code == 202
    await asyncio.gather(*posted)


def _labeled(number: int) -> dict[str, Any]:
    payload = example("issues", "labeled")
    payload["label"]["name"] = "repairbot"
    payload["installation"] = {"id": 4242}
    payload["issue"]["number"] = number
    return payload


def _rows(engine: Engine) -> dict[str, Any]:
    with engine.connect() as conn:
        return {r.delivery_id: r for r in conn.execute(select(table))}


def _run_ids(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(select(runs.c.workflow_id)).scalars())


async def test_deliveries_that_arrive_together_share_one_transaction(
    app: Any, db_engine: Engine
) -> None:
    poster, writer = app
    async with grouped(writer, db_engine, poster) as post:
        answers = [post("issues", _labeled(n), delivery=f"d-{n}") for n in range(1, 11)]
    assert [a.result().status_code for a in answers] == [202] * 10
    # Two transactions: the first delivery alone (nothing waited when it
    # came), then the ten that queued behind it, together.
    assert (writer.batches, writer.deliveries) == (2, 11)
    rows = _rows(db_engine)
    assert len(rows) == 11 and {rows[f"d-{n}"].status for n in range(1, 11)} == {"handled"}
    # One transaction, one clock reading: all ten share their time of receipt.
    assert len({rows[f"d-{n}"].received_at for n in range(1, 11)}) == 1
    assert rows["first"].received_at < rows["d-1"].received_at
    assert len(_run_ids(db_engine)) == 10


async def test_a_duplicate_and_a_failing_handler_affect_only_themselves(
    app: Any, db_engine: Engine
) -> None:
    poster, writer = app
    async with grouped(writer, db_engine, poster) as post:
        a = post("issues", _labeled(1), delivery="a")
        a_again = post("issues", _labeled(1), delivery="a")  # a copy in the same group
        first_again = post("star", STAR, delivery="first")  # a copy committed before
        doomed = post("ping", example("ping", "ping"), delivery="doomed")
        b = post("issues", _labeled(2), delivery="b")
        malformed = post("issues", b"{not json", delivery="bad")
    assert writer.batches == 2
    assert a.result().status_code == 202 and b.result().status_code == 202
    assert a_again.result().status_code == 200
    assert "already received" in a_again.result().json()["message"]
    assert first_again.result().status_code == 200
    # As without grouping: the failure is recorded and acknowledged, and the
    # handler's own writes are gone.
    assert doomed.result().status_code == 202
    assert "failed" in doomed.result().json()["message"]
    assert malformed.result().status_code == 400
    rows = _rows(db_engine)
    statuses = {key: row.status for key, row in rows.items()}
    assert statuses == {
        "first": "ignored",
        "a": "handled",
        "doomed": "failed",
        "b": "handled",
        "bad": "malformed",
    }
    assert "RuntimeError: handler bug" in rows["doomed"].detail
    assert not any(w.startswith("doomed-") for w in _run_ids(db_engine))
    assert len(_run_ids(db_engine)) == 2  # a's and b's runs, once each


@contextmanager
def poisoned(engine: Engine, delivery_id: str) -> Iterator[None]:
    """Recording ``delivery_id`` fails in the database. PostgreSQL: at COMMIT
    (a deferred constraint trigger), so the group's commit itself fails.
    SQLite: at its INSERT (SQLite has no deferred triggers)."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(
                text(
                    "CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                    "RAISE EXCEPTION 'poisoned delivery'; END $$"
                )
            )
            conn.execute(
                text(
                    "CREATE CONSTRAINT TRIGGER poison AFTER INSERT ON webhook_deliveries "
                    "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
                    f"WHEN (NEW.delivery_id = '{delivery_id}') EXECUTE FUNCTION poison()"
                )
            )
        else:
            conn.execute(
                text(
                    "CREATE TRIGGER poison BEFORE INSERT ON webhook_deliveries "
                    f"WHEN NEW.delivery_id = '{delivery_id}' "
                    "BEGIN SELECT RAISE(ABORT, 'poisoned delivery'); END"
                )
            )
    try:
        yield
    finally:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("DROP TRIGGER poison ON webhook_deliveries"))
                conn.execute(text("DROP FUNCTION poison()"))
            else:
                conn.execute(text("DROP TRIGGER poison"))


async def test_a_group_whose_transaction_fails_is_recorded_one_by_one(
    app: Any, db_engine: Engine
) -> None:
    poster, writer = app
    with poisoned(db_engine, "poison"):
        async with grouped(writer, db_engine, poster) as post:
            a = post("issues", _labeled(1), delivery="a")
            poison = post("issues", _labeled(2), delivery="poison")
            b = post("issues", _labeled(3), delivery="b")
    assert writer.batches == 2
    assert a.result().status_code == 202 and b.result().status_code == 202
    # Not recorded, so not acknowledged: GitHub marks it failed and the
    # delivery reconciler has it sent again.
    assert poison.result().status_code == 503
    rows = _rows(db_engine)
    assert {rows["a"].status, rows["b"].status} == {"handled"} and "poison" not in rows
    with db_engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(runs)).scalar_one() == 2


async def test_a_delivery_alone_is_written_at_once(app: Any, db_engine: Engine) -> None:
    poster, writer = app
    for n in range(3):
        response = await poster.post("issues", _labeled(n + 1), delivery=f"d-{n}")
        assert response.status_code == 202
    assert (writer.batches, writer.deliveries) == (3, 3)


async def test_a_duplicate_in_a_group_needs_no_savepoints(
    app: Any, db_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """The fast path (one INSERT for the group's records, no savepoint each)
    answers a second copy within the group itself, without handling it."""
    poster, writer = app
    caplog.set_level("INFO", logger="repairbot.intake")
    async with grouped(writer, db_engine, poster) as post:
        a = post("issues", _labeled(1), delivery="a")
        a_again = post("issues", _labeled(1), delivery="a")
    assert [a.result().status_code, a_again.result().status_code] == [202, 200]
    assert "already received" in a_again.result().json()["message"]
    assert "recorded with savepoints" not in caplog.text
    assert _rows(db_engine)["a"].status == "handled" and len(_run_ids(db_engine)) == 1


async def test_a_failing_handler_sends_its_group_through_savepoints(
    app: Any, db_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler that fails in the fast path: the group, whole, is rolled back
    and recorded again with a savepoint per delivery, still in one transaction."""
    poster, writer = app
    caplog.set_level("INFO", logger="repairbot.intake")
    async with grouped(writer, db_engine, poster) as post:
        b = post("issues", _labeled(2), delivery="b")
        doomed = post("ping", example("ping", "ping"), delivery="doomed")
    assert "recorded with savepoints: a handler failed on delivery doomed" in caplog.text
    assert b.result().status_code == 202 and "failed" in doomed.result().json()["message"]
    rows = _rows(db_engine)
    assert (rows["b"].status, rows["doomed"].status) == ("handled", "failed")
    # Redone in one transaction (one clock reading), not one delivery at a time.
    assert rows["b"].received_at == rows["doomed"].received_at
    assert not any(w.startswith("doomed-") for w in _run_ids(db_engine))


def _intake(engine: Engine) -> Intake:
    settings = Settings(github_webhook_secret=SECRET, trigger_label="repairbot")
    runtime = Runtime(engine, Registry.of(STAND_INS))
    return Intake(runtime.store, runtime.registry, build_router(), settings)


def _request(event: str, payload: Any, delivery: str) -> tuple[dict[str, str], bytes]:
    body = json.dumps(payload).encode()
    headers = {"x-github-event": event, "x-github-delivery": delivery}
    return headers | {"x-hub-signature-256": sign(body, SECRET)}, body


def test_a_group_of_fresh_deliveries_looks_nothing_up(db_engine: Engine) -> None:
    """The fast path does not look for earlier records: of the deliveries
    table it only writes, all the group's records in one INSERT."""
    intake = _intake(db_engine)
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "webhook_deliveries" in statement:
            statements.append(statement.split(None, 1)[0].upper())

    event.listen(db_engine, "before_cursor_execute", seen)
    try:
        answers = record_together(intake, [_request("star", STAR, f"fresh-{n}") for n in range(3)])
    finally:
        event.remove(db_engine, "before_cursor_execute", seen)
    assert [a.status_code for a in answers if isinstance(a, IntakeResult)] == [202] * 3
    assert statements == ["INSERT"]


def test_a_copy_recorded_before_its_group_takes_its_handling_back(
    db_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing looked up first, so the fast path handles a copy of a recorded
    delivery like a fresh one; the INSERT finds the copy, and the group is
    rolled back whole and recorded again with savepoints: the copy's handling
    (a run started) does not stay, the fresh delivery's does."""
    intake = _intake(db_engine)
    caplog.set_level("INFO", logger="repairbot.intake")
    [first] = record_together(intake, [_request("star", STAR, "copy")])
    assert isinstance(first, IntakeResult) and first.status_code == 202
    copy, fresh = record_together(
        intake,
        [_request("issues", _labeled(7), "copy"), _request("issues", _labeled(8), "fresh")],
    )
    assert isinstance(copy, IntakeResult) and isinstance(fresh, IntakeResult)
    assert copy.status_code == 200 and "already received (ignored)" in copy.message
    assert fresh.status_code == 202 and "started" in fresh.message
    assert "recorded with savepoints: a copy of a delivery is recorded already" in caplog.text
    assert len(_run_ids(db_engine)) == 1  # the fresh delivery's run alone
    rows = _rows(db_engine)
    assert (rows["copy"].status, rows["fresh"].status) == ("ignored", "handled")


async def test_a_copy_committed_after_the_lookup_takes_the_handling_back(
    db_engine: Engine,
) -> None:
    """Another transaction may commit a copy between the savepoint path's
    lookup and its INSERT (another writer, another web process): the INSERT
    then writes nothing for it, and the run the handler started for the copy
    must not stay. Here the lookup is made to miss the copy."""
    settings = Settings(github_webhook_secret=SECRET, trigger_label="repairbot")
    runtime = Runtime(db_engine, Registry.of(STAND_INS))
    intake = Intake(runtime.store, runtime.registry, build_router(), settings)
    star, labeled = json.dumps(STAR).encode(), json.dumps(_labeled(7)).encode()

    def request(event: str, body: bytes) -> tuple[dict[str, str], bytes]:
        headers = {"x-github-event": event, "x-github-delivery": "copy"}
        return headers | {"x-hub-signature-256": sign(body, SECRET)}, body

    [first] = record_together(intake, [request("star", star)])
    assert first.status_code == 202
    intake.recorded = lambda tx, ids: {}  # type: ignore[method-assign]
    [again] = record_together(intake, [request("issues", labeled)])
    assert isinstance(again, IntakeResult)
    assert again.status_code == 200 and "already received" in again.message
    assert _run_ids(db_engine) == set()
    assert _rows(db_engine)["copy"].status == "ignored"


@pytest.fixture
async def writers_app(db_engine: Engine) -> AsyncIterator[tuple[Poster, GroupCommit]]:
    settings = Settings(github_webhook_secret=SECRET, trigger_label="repairbot")
    runtime = Runtime(db_engine, Registry.of(STAND_INS))
    web = create_app(settings, runtime, router=build_router())
    transport = httpx.ASGITransport(app=web)
    async with httpx.AsyncClient(transport=transport, base_url="http://repairbot") as client:
        yield Poster(client, SECRET), web.state.intake_writer


async def test_writers_at_once(writers_app: Any, db_engine: Engine) -> None:
    """PostgreSQL: up to ``writers`` transactions run at once, the next
    delivery queues for the first to finish. SQLite: one writer."""
    poster, writer = writers_app
    if db_engine.dialect.name != "postgresql":
        assert writer.writers == 1
        return
    assert writer.writers == POSTGRES_WRITERS
    writer.writers = 2
    with writers_held(db_engine):
        first = asyncio.create_task(poster.post("issues", _labeled(1), delivery="w-1"))
        await until(lambda: writer.in_transaction == 1)
        second = asyncio.create_task(poster.post("issues", _labeled(2), delivery="w-2"))
        await until(lambda: writer.in_transaction == 2)
        third = asyncio.create_task(poster.post("issues", _labeled(3), delivery="w-3"))
        await until(lambda: writer.waiting == 1)
        assert writer.in_transaction == 2
    answers = await asyncio.gather(first, second, third)
    assert [a.status_code for a in answers] == [202] * 3
    assert writer.most_at_once == 2 and (writer.batches, writer.deliveries) == (3, 3)
    assert len(_run_ids(db_engine)) == 3


def test_the_writer_checkpoints_sqlite_only(db_engine: Engine) -> None:
    """SQLite's WAL is checkpointed beside the writer; PostgreSQL has none."""
    settings = Settings(github_webhook_secret=SECRET)
    web = create_app(settings, Runtime(db_engine, Registry.of(STAND_INS)), router=build_router())
    expected = SQLITE_CHECKPOINT_EVERY if db_engine.dialect.name == "sqlite" else 0
    assert web.state.intake_writer.checkpoint_every == expected


async def _post_large_issues(poster: Any, count: int, prefix: str) -> None:
    """``count`` issues opened with a 200 KB body each: pages enough in the
    WAL to see whether they were copied back into the database file."""
    for n in range(count):
        body = example("issues", "opened")
        body["issue"]["body"] = "x" * 200_000
        assert (await poster.post("issues", body, delivery=f"{prefix}-{n}")).status_code == 202


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_checkpoint_runs_beside_the_writer(
    app: Any, db_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """Every ``checkpoint_every`` deliveries a real checkpoint starts on
    another of the store's threads and copies the WAL back."""
    poster, writer = app
    writer.checkpoint_every = 2
    database = Path(db_engine.url.database or "")
    before = database.stat().st_size
    await _post_large_issues(poster, 3, "c")
    assert writer.checkpoints == 1
    await writer._checkpointing
    assert "checkpoint" not in caplog.text
    assert database.stat().st_size > before + 200_000


async def test_one_checkpoint_at_a_time_and_the_writer_goes_on(
    app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    poster, writer = app
    writer.checkpoint_every = 1
    started, release = threading.Event(), threading.Event()
    calls: list[Engine] = []

    def slow_checkpoint(engine: Engine) -> None:
        calls.append(engine)
        started.set()
        release.wait(30)

    monkeypatch.setattr("app.web.group_commit.checkpoint_wal", slow_checkpoint)
    try:
        assert (await poster.post("star", STAR, delivery="one")).status_code == 202
        await until(started.is_set)
        # The checkpoint holds its thread: deliveries are recorded and answered.
        for n in range(3):
            assert (await poster.post("star", STAR, delivery=f"more-{n}")).status_code == 202
        assert writer.checkpoints == 1 and len(calls) == 1
    finally:
        release.set()
    await writer._checkpointing
    assert (await poster.post("star", STAR, delivery="after")).status_code == 202
    assert writer.checkpoints == 2


async def test_a_failed_checkpoint_is_logged_and_deliveries_go_on(
    app: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    poster, writer = app
    writer.checkpoint_every = 1

    def broken_checkpoint(engine: Engine) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("app.web.group_commit.checkpoint_wal", broken_checkpoint)
    assert (await poster.post("star", STAR, delivery="one")).status_code == 202
    await writer._checkpointing
    assert "WAL checkpoint beside the intake writer failed" in caplog.text
    assert (await poster.post("star", STAR, delivery="two")).status_code == 202
    assert writer.checkpoints == 2


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_the_writers_commits_leave_the_wal_to_the_checkpoints(
    app: Any, db_engine: Engine
) -> None:
    """More than SQLite's 1,000 pages of WAL, recorded between two of the
    writer's own checkpoints: no COMMIT copied them back meanwhile."""
    poster, writer = app
    writer.checkpoint_every = 1000
    database = Path(db_engine.url.database or "")
    before = database.stat().st_size
    await _post_large_issues(poster, 25, "w")
    assert writer.checkpoints == 0
    assert database.stat().st_size < before + 200_000


async def test_no_checkpoints_where_there_is_no_wal(app: Any) -> None:
    poster, writer = app
    writer.checkpoint_every = 0
    for n in range(2):
        assert (await poster.post("star", STAR, delivery=f"n-{n}")).status_code == 202
    assert writer.checkpoints == 0 and writer._checkpointing is None
