"""signed-out dashboard sessions; per-installation run slots

Logout used to delete the cookie only: a copy taken before stayed valid until
it expired. The ids of signed-out sessions are kept until then and refused.

Run slots cap the repair runs of one installation that do costly work at once
(REPAIRBOT_MAX_ACTIVE_RUNS_PER_INSTALLATION); the primary key makes taking the
last slot race-free across workers.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 01:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "signed_out_sessions",
        sa.Column("sid_sha256", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("sid_sha256"),
    )
    op.create_index(
        "ix_signed_out_sessions_expires_at", "signed_out_sessions", ["expires_at"], unique=False
    )

    op.create_table(
        "installation_run_slots",
        sa.Column("installation_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("slot", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("taken_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("installation_id", "slot"),
        sa.UniqueConstraint("run_id"),
    )


def downgrade() -> None:
    op.drop_table("installation_run_slots")
    op.drop_index("ix_signed_out_sessions_expires_at", table_name="signed_out_sessions")
    op.drop_table("signed_out_sessions")
