"""signed-out dashboard sessions

Logout used to delete the cookie only: a copy taken before stayed valid until
it expired. The ids of signed-out sessions are kept until then and refused.

Revision ID: 0011
Revises: 0008
Create Date: 2026-12-02 01:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0011"
down_revision = "0008"
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


def downgrade() -> None:
    op.drop_index("ix_signed_out_sessions_expires_at", table_name="signed_out_sessions")
    op.drop_table("signed_out_sessions")
