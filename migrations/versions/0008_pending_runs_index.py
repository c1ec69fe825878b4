"""index for the reconciler's runnable-without-job query

A pass read every open run (a sequential scan filtered on pending_task), so
its cost grew with the runs parked on signals and timers. With the index it
reads only runs that wait for a workflow task.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30 17:30:00
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_workflow_runs_pending", "workflow_runs", ["pending_task", "updated_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_workflow_runs_pending", table_name="workflow_runs")
