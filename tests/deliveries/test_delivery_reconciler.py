"""The delivery reconciler against the emulated GitHub: deliveries that failed
while the receiver was down are found by cursor paging, redelivered, and
recorded by the real intake exactly once; requests stay one per guid per
interval across workers; rate limits stop every worker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, func, select

from app.app_tables import DeliveryScan, WebhookDelivery
from app.config import Settings
from app.engine._registry import Registry
from app.engine._store import Store
from app.github.auth import AppCredentials
from app.github.client import GitHubClientFactory
from app.intake.pipeline import Intake
from app.intake.reconciler import MAX_REQUESTS, DeliveryReconciler, pending_redeliveries
from emulator.app import Emulator
from emulator.client import EmulatorClient
from emulator.faults import Fault
from handlers import build_router
from tests.web.support import STAND_INS

SECRET = "reconciler-secret"
BASE_PATH = "/api/v3"
table = WebhookDelivery.__table__  # type: ignore[attr-defined]


@dataclass
class Receiver:
    """Stands where the web process would: the real intake, reachable or not."""

    intake: Intake
    down: bool = False
    answered: list[int] = field(default_factory=list)

    def __call__(self, url: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        if self.down:
            raise httpx.ConnectError("[Errno 111] Connection refused")
        result = self.intake.receive(httpx.Headers(headers), body)
        self.answered.append(result.status_code)
        return result.status_code, result.message


@dataclass
class Scene:
    emulator: Emulator
    client: EmulatorClient
    receiver: Receiver
    factory: GitHubClientFactory
    engine: Engine
    clock: list[float]

    def reconciler(self, holder: str = "w1", **kwargs: Any) -> DeliveryReconciler:
        return DeliveryReconciler(
            self.engine,
            self.factory,
            interval=60.0,
            holder=holder,
            clock=lambda: self.clock[0],
            **kwargs,
        )

    async def issues(self, count: int) -> None:
        for n in range(count):
            await self.client.create_issue("octo", "demo", as_user="octo", title=f"bug {n}")
        await self.client.deliveries.wait()

    def recorded(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(table.c.delivery_id, func.count()).group_by(table.c.delivery_id)
            ).all()
        return {guid: n for guid, n in rows}

    def attempts(self, *, redelivery: bool | None = None) -> list[Any]:
        return [
            d
            for d in self.emulator.dispatcher.list()
            if d.event == "issues" and (redelivery is None or d.redelivery == redelivery)
        ]


@pytest.fixture
async def scene(tmp_path: Path, db_engine: Engine) -> AsyncIterator[Scene]:
    settings = Settings(github_webhook_secret=SECRET)
    intake = Intake(Store(db_engine), Registry.of(STAND_INS), build_router(), settings)
    receiver = Receiver(intake)
    emulator = Emulator(root=tmp_path / "emu", base_path=BASE_PATH, sender=receiver)
    transport = httpx.ASGITransport(app=emulator.asgi())
    client = EmulatorClient("http://emulator", base_path=BASE_PATH, transport=transport)
    await client.create_user("octo")
    await client.create_repo_from_folder("octo", "demo", None)
    app = await client.create_app(
        name="repairbot", webhook_url="http://repairbot/webhooks/github", webhook_secret=SECRET
    )
    await client.create_installation(app.id, "octo")
    await client.deliveries.wait()
    assert app.private_key_pem is not None
    factory = GitHubClientFactory(
        base_url=client.api_url,
        credentials=AppCredentials(str(app.id), app.private_key_pem),
        transport=transport,
    )
    yield Scene(emulator, client, receiver, factory, db_engine, [time.time()])
    await client.aclose()
    emulator.close()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_deliveries_missed_while_down_are_redelivered_and_recorded_once(
    scene: Scene,
) -> None:
    scene.receiver.down = True
    await scene.issues(5)
    missed = {d.guid for d in scene.attempts()}
    assert len(missed) == 5 and not (missed & set(scene.recorded()))
    scene.receiver.down = False
    # Two deliveries a page, at most two pages a pass: the scan needs passes to
    # reach the end and resumes from GitHub's cursor in between.
    reconciler = scene.reconciler(page_size=2, pages_per_pass=2)
    first = await reconciler.run_once()
    assert not first.scan_complete and first.pages == 2
    second = await reconciler.run_once()
    assert second.scan_complete
    assert set(first.found + second.found) == missed
    await scene.client.deliveries.wait()
    recorded = scene.recorded()
    assert {guid: recorded.get(guid) for guid in missed} == {guid: 1 for guid in missed}
    # The next pass closes them, and asks for nothing more.
    scene.clock[0] += 120
    third = await reconciler.run_once()
    assert set(third.recorded) == missed and third.requested == []
    assert len(scene.attempts(redelivery=True)) == 5
    assert {r.state for r in pending_redeliveries(scene.engine)} == {"recorded"}


async def test_several_workers_ask_once_per_guid_per_interval(scene: Scene) -> None:
    scene.receiver.down = True
    await scene.issues(3)
    workers = [scene.reconciler(f"w{n}") for n in range(3)]
    reports = await asyncio.gather(*(w.run_once() for w in workers))
    await scene.client.deliveries.wait()
    assert sum(len(r.requested) for r in reports) == 3
    assert len(scene.attempts(redelivery=True)) == 3
    # Within the interval nobody asks again, even though they are still missing.
    reports = await asyncio.gather(*(w.run_once() for w in workers))
    assert sum(len(r.requested) for r in reports) == 0
    scene.clock[0] += 61
    reports = await asyncio.gather(*(w.run_once() for w in workers))
    await scene.client.deliveries.wait()
    assert sum(len(r.requested) for r in reports) == 3
    assert len(scene.attempts(redelivery=True)) == 6
    # Still down: none of them is recorded, and nothing was recorded twice.
    assert not {d.guid for d in scene.attempts()} & set(scene.recorded())


async def test_a_delivery_that_never_arrives_is_given_up_after_bounded_asks(
    scene: Scene,
) -> None:
    scene.receiver.down = True
    await scene.issues(1)
    reconciler = scene.reconciler()
    asked = 0
    waits = []
    for _ in range(MAX_REQUESTS + 2):
        report = await reconciler.run_once()
        asked += len(report.requested)
        [row] = pending_redeliveries(scene.engine)
        waits.append(reconciler.backoff(row.requests))
        scene.clock[0] += 61 * 64
    await scene.client.deliveries.wait()
    assert asked == MAX_REQUESTS
    [row] = pending_redeliveries(scene.engine)
    assert row.state == "gave-up" and row.requests == MAX_REQUESTS
    # The wait between asks doubled from the interval, up to its cap.
    assert waits[:4] == [60.0, 120.0, 240.0, 480.0] and max(waits) == 60.0 * 64


async def test_a_rate_limit_holds_back_every_worker(scene: Scene) -> None:
    scene.receiver.down = True
    await scene.issues(2)
    scene.emulator.faults.add(
        Fault(
            endpoint="POST /app/hook/deliveries/{delivery_id}/attempts",
            kind="rate_limit",
            retry_after=600,
        )
    )
    first = await scene.reconciler("w1").run_once()
    assert first.requested == [] and len(first.found) == 2
    scans = DeliveryScan.__table__  # type: ignore[attr-defined]
    with scene.engine.connect() as conn:
        not_before = conn.execute(select(scans.c.not_before)).scalar_one()
    assert not_before >= scene.clock[0] + 600
    other = await scene.reconciler("w2").run_once()
    assert other.skipped and other.requested == []
    scene.clock[0] = not_before + 1
    scene.receiver.down = False
    later = await scene.reconciler("w2").run_once()
    await scene.client.deliveries.wait()
    assert len(later.requested) == 2
    assert all(scene.recorded().get(g) == 1 for g in later.requested)


async def test_a_delivery_recorded_as_failed_is_asked_for_again(
    scene: Scene, db_engine: Engine
) -> None:
    from sqlalchemy import update

    await scene.issues(1)
    [attempt] = scene.attempts()
    with db_engine.begin() as conn:  # its handling failed (a database blip, say)
        conn.execute(
            update(table).where(table.c.delivery_id == attempt.guid).values(status="failed")
        )
    report = await scene.reconciler().run_once()
    await scene.client.deliveries.wait()
    assert report.requested == [attempt.guid]
    with db_engine.connect() as conn:
        row = conn.execute(select(table).where(table.c.delivery_id == attempt.guid)).one()
    assert row.status != "failed" and row.attempts == 2
