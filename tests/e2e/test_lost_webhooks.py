"""Webhooks sent while the web process is down are not lost.

GitHub does not retry a failed delivery. Here the web process goes away while
a repair run waits for review; the approval and a few comments fail to
arrive (connection refused, recorded as failed by the emulated GitHub). When
the web is back, the worker process's delivery reconciler finds them in the
App's delivery list and has GitHub redeliver them: the intake records each
exactly once, and the approval reaches the waiting run, which merges.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.app_tables import WebhookDelivery
from app.demo.project import fix_agent_command, write_project
from app.demo.run import WorkerProcess
from app.demo.serve import ServerThread, bind
from app.demo.stack import LocalStack
from app.intake.reconciler import pending_redeliveries
from app.web import create_app
from handlers import build_router
from tests.e2e.scenario import github_state, open_labelled_issue, wait_end, wait_for, wait_phase

table = WebhookDelivery.__table__  # type: ignore[attr-defined]


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    return write_project(tmp_path / "project")


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_deliveries_missed_while_the_web_was_down_reach_the_run(
    stack: LocalStack, tmp_path: Path
) -> None:
    assert stack.settings is not None and stack.emulator is not None
    settings = stack.settings.with_overrides(
        agent_command=tuple(fix_agent_command()),
        relay_grace=0.2,
        reconcile_interval=0.1,
        delivery_reconcile_interval=0.5,
    )
    stack.settings = settings
    runtime = stack.start_repairbot(run_worker=False)
    worker = WorkerProcess(settings, tmp_path / "worker.log")
    worker.start()
    try:
        number = await open_labelled_issue(stack)
        status = await wait_phase(stack, number, "awaiting-review", timeout=120)

        web = stack._servers.pop()
        host, port = web.sock.getsockname()[:2]
        web.stop()  # the web process is gone: deliveries now fail to connect
        before = len(stack.emulator.dispatcher.list())
        people = stack.people
        for n in range(3):
            await stack.gh.comment(
                people.owner, stack.repo_name, number, f"note {n}", as_user=people.maintainer
            )
        await stack.gh.review(
            people.owner,
            stack.repo_name,
            status["pull_number"],
            as_user=people.maintainer,
            event="APPROVE",
            body="Approved while the bot was down.",
        )
        await stack.gh.deliveries.wait()
        missed = stack.emulator.dispatcher.list()[before:]
        assert missed and all(d.status_code == 0 for d in missed), [d.status for d in missed]
        assert {d.event for d in missed} >= {"issue_comment", "pull_request_review"}

        # The web comes back on the same address.
        app = create_app(settings, runtime, router=build_router())
        restarted = ServerThread(app, bind(host, port), name="repairbot").start()
        stack._servers.append(restarted)

        run = await wait_end(stack, number, timeout=120)
        assert run.status == "completed", run.error
        assert run.result["outcome"] == "merged"
        assert run.result["approval"]["reviewer"] == people.maintainer

        guids = {d.guid for d in missed}

        def recorded_once() -> bool:
            with runtime.engine.connect() as conn:
                rows = conn.execute(
                    select(table.c.delivery_id, func.count())
                    .where(table.c.delivery_id.in_(guids))
                    .group_by(table.c.delivery_id)
                ).all()
            return {guid: n for guid, n in rows} == {guid: 1 for guid in guids}

        await wait_for("every missed delivery recorded once", recorded_once, timeout=60)

        # The reconciler's next pass closes its rows as recorded.
        def rows_closed() -> bool:
            states = {r.guid: r.state for r in pending_redeliveries(runtime.engine)}
            return all(states.get(guid) == "recorded" for guid in guids)

        await wait_for("redeliveries closed as recorded", rows_closed, timeout=60)
        redelivered = [
            d for d in stack.emulator.dispatcher.list() if d.guid in guids and d.redelivery
        ]
        assert {d.guid for d in redelivered if d.status_code == 202} == guids
        [pull] = (await github_state(stack, number))["pulls"]
        assert pull["merged_at"] is not None
    finally:
        worker.stop()
        if worker.process is not None:
            assert worker.process.wait(timeout=30) is not None


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_the_cli_runs_one_reconciler_pass(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing listens for webhooks yet: the labelled issue's deliveries failed.
    ``repairbot deliveries reconcile`` finds them and asks GitHub again."""
    import asyncio

    from app.main.cli import main
    from app.operations.migrate import upgrade

    assert stack.settings is not None and stack.emulator is not None
    assert stack._app_socket is not None
    stack._app_socket.close()  # bound but never served: close it, so connections are refused
    upgrade(stack.settings.database_url)
    await open_labelled_issue(stack)
    await stack.gh.deliveries.wait()
    failed = {d.guid for d in stack.emulator.dispatcher.list() if d.status_code == 0}
    assert failed
    for name, value in {**stack.settings.to_env(), **stack.settings.secret_env()}.items():
        monkeypatch.setenv(name, value)
    code = await asyncio.to_thread(main, ["deliveries", "reconcile", "--interval", "60"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"{len(failed)} missing found, {len(failed)} redeliveries asked" in out
    for guid in failed:
        assert guid in out  # still pending until the intake has them
    await stack.gh.deliveries.wait()
    asked = [d for d in stack.emulator.dispatcher.list() if d.redelivery]
    assert {d.guid for d in asked} == failed
