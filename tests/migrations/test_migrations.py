"""The Alembic migrations build exactly the schema the models describe, on
SQLite and PostgreSQL, and can be rolled back."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from app.app_tables import whole_schema
from app.engine._db import make_engine
from app.operations.migrate import downgrade, upgrade


def test_migrations_match_the_models(db_url: str) -> None:
    engine = make_engine(db_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), whole_schema())
    engine.dispose()
    assert diff == [], f"models and migrations disagree: {diff}"


def test_upgrade_downgrade_upgrade(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/m.db"
    upgrade(url)
    downgrade(url, "base")
    engine = make_engine(url)
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    engine.dispose()
    upgrade(url)
    engine = make_engine(url)
    assert {"workflow_runs", "history_events", "webhook_deliveries"} <= set(
        inspect(engine).get_table_names()
    )
    engine.dispose()


def _run_row(
    run_id: str, workflow_id: str, active: bool, input: dict[str, object]
) -> dict[str, object]:
    return {
        "run_id": run_id,
        "workflow_id": workflow_id,
        "active_key": workflow_id if active else None,
        "workflow_name": "repair",
        "workflow_version": 2,
        "status": "running" if active else "completed",
        "input": input,
        "history_length": 1,
        "pending_task": False,
        "deadline_notified": False,
        "created_at": float(len(run_id)),
        "updated_at": 0.0,
    }


def test_0009_keys_repair_runs_by_repository_id(db_url: str) -> None:
    """Open runs (and the closed ones their run numbers count) move from the
    name key to the repository id key; a run whose input lacks the id keeps
    its name; two active runs that now share a key (a rename started a second
    one) keep one active key each; downgrade puts the names back."""
    from sqlalchemy import delete, insert, select

    from app.engine._store.schema import runs, signals

    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(delete(signals))
        conn.execute(delete(runs))
    engine.dispose()
    downgrade(db_url, "0008")
    engine = make_engine(db_url)
    request = {"repo": "Octo/Widgets", "repo_id": 77, "issue_number": 5}
    renamed = {"repo": "octo/gadgets", "repo_id": 77, "issue_number": 5}
    with engine.begin() as conn:
        conn.execute(
            insert(runs),
            [
                _run_row("repair:octo/widgets#5/1", "repair:octo/widgets#5", False, request),
                _run_row("repair:octo/widgets#5/2", "repair:octo/widgets#5", True, request),
                _run_row("repair:octo/gadgets#5/1.", "repair:octo/gadgets#5", True, renamed),
                _run_row("repair:o/old#1/1", "repair:o/old#1", True, {"repo": "o/old"}),
            ],
        )
        conn.execute(
            insert(signals).values(
                workflow_id="repair:octo/widgets#5",
                run_id="repair:octo/widgets#5/2",
                name="review",
                dedupe_key="review:1:submitted",
                payload={},
                received_at=0.0,
            )
        )
    engine.dispose()
    upgrade(db_url)
    engine = make_engine(db_url)
    with engine.connect() as conn:
        rows = {r.run_id: r for r in conn.execute(select(runs))}
        signal = conn.execute(select(signals)).one()
    engine.dispose()
    assert rows["repair:octo/widgets#5/1"].workflow_id == "repair:77#5"
    assert rows["repair:octo/widgets#5/1"].active_key is None
    # The newest active run holds the id key; the older stays reachable by its name.
    assert rows["repair:octo/gadgets#5/1."].active_key == "repair:77#5"
    assert rows["repair:octo/widgets#5/2"].active_key == "repair:octo/widgets#5"
    assert rows["repair:octo/widgets#5/2"].workflow_id == "repair:77#5"
    assert rows["repair:o/old#1/1"].workflow_id == "repair:o/old#1"
    assert rows["repair:o/old#1/1"].active_key == "repair:o/old#1"
    assert signal.workflow_id == "repair:77#5"

    downgrade(db_url, "0008")
    engine = make_engine(db_url)
    with engine.connect() as conn:
        back = {r.run_id: r.workflow_id for r in conn.execute(select(runs))}
    engine.dispose()
    upgrade(db_url)
    assert back["repair:octo/widgets#5/2"] == "repair:octo/widgets#5"
    assert back["repair:octo/gadgets#5/1."] == "repair:octo/gadgets#5"
