"""Collecting unreferenced evidence: only artifacts past retention that no
history, run, pending activity or signal mentions; never one put again while
the collector looked."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, select
from sqlmodel import Session

from app.engine._tables import ActivityTask, HistoryEvent, WorkflowRun
from app.evidence import DatabaseEvidenceStore
from app.evidence.collect import collect_unreferenced
from app.evidence.database import blobs
from app.main.cli import main

DAY = 86400.0


def stored(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(select(blobs.c.sha256)).scalars())


def record(engine: Engine, *rows: object) -> None:
    with Session(engine) as session:
        session.add_all(rows)
        session.commit()


def a_run(run_id: str, **fields: object) -> WorkflowRun:
    return WorkflowRun(
        run_id=run_id,
        workflow_id=run_id,
        workflow_name="repair",
        workflow_version=1,
        status="running",
        created_at=0.0,
        updated_at=0.0,
        **fields,
    )


def test_collects_only_old_unreferenced_artifacts(db_engine: Engine) -> None:
    now = [10 * DAY]
    store = DatabaseEvidenceStore(db_engine, clock=lambda: now[0])
    in_history = store.put(b"verified log", kind="test-log", name="v.log")
    in_run_input = store.put(b"patch from the parent run", kind="patch", name="p.patch")
    in_task_input = store.put(b"candidate", kind="patch", name="c.patch")
    orphan = store.put(b"written by a worker killed mid-attempt", kind="agent-transcript", name="t")
    now[0] = 20 * DAY
    recent_orphan = store.put(b"an attempt still running", kind="test-log", name="r.log")
    record(
        db_engine,
        a_run("run-1", input={"patch": in_run_input.model_dump()}),
        HistoryEvent(
            run_id="run-1",
            seq=1,
            type="activity_completed",
            data={"result": {"log": in_history.model_dump(), "commit": "a" * 40}},
            created_at=now[0],
        ),
        ActivityTask(
            run_id="run-1",
            cmd=2,
            activity="github.build_commit",
            operation_id="run-1:2",
            input={"patch_sha": in_task_input.sha256},
            input_hash="f" * 64,
            options={},
            status="scheduled",
            scheduled_at=now[0],
            next_attempt_at=now[0],
        ),
    )
    before = stored(db_engine)
    report = collect_unreferenced(db_engine, retention=7 * DAY, now=now[0])
    assert stored(db_engine) == before - {orphan.sha256}
    assert (report.candidates, report.referenced, report.deleted) == (4, 3, 1)
    assert report.bytes_freed > 0
    assert recent_orphan.sha256 in stored(db_engine)
    # Idempotent: a second pass finds nothing more to delete.
    again = collect_unreferenced(db_engine, retention=7 * DAY, now=now[0])
    assert again.deleted == 0


def test_bytes_put_again_after_the_candidates_were_chosen_are_kept(db_engine: Engine) -> None:
    now = [0.0]
    store = DatabaseEvidenceStore(db_engine, clock=lambda: now[0])
    old = store.put(b"the same log, once more", kind="test-log", name="a.log")
    now[0] = 30 * DAY
    store.put(b"the same log, once more", kind="test-log", name="b.log")  # a fresh attempt
    report = collect_unreferenced(db_engine, retention=7 * DAY, now=now[0])
    assert report.deleted == 0 and old.sha256 in stored(db_engine)
    # Once it ages out with nothing pointing at it, it goes; and put brings it back.
    assert collect_unreferenced(db_engine, retention=7 * DAY, now=40 * DAY).deleted == 1
    assert not store.exists(old.sha256)
    assert store.get_ref(store.put(b"the same log, once more", kind="k", name="n"))


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_collect_command(
    db_url: str,
    db_engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    store = DatabaseEvidenceStore(db_engine, clock=lambda: 0.0)
    orphan = store.put(b"nobody refers to this", kind="k", name="n")
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("REPAIRBOT_DATA_DIR", str(tmp_path))
    assert main(["evidence", "get", orphan.sha256]) == 0
    assert capsys.readouterr().out == "nobody refers to this"
    assert main(["evidence", "collect", "--retention-days", "1"]) == 0
    assert "1 deleted" in capsys.readouterr().out
    assert main(["evidence", "get", orphan.sha256]) == 1
    assert "no evidence" in capsys.readouterr().err
