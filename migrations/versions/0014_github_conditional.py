"""conditional-request cache and shared rate budget per installation

Revision ID: 0014
Revises: 0009
Create Date: 2026-12-02 01:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0014"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "github_conditional",
        sa.Column("installation_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("request_key", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("etag", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("content_type", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("stored_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("installation_id", "request_key"),
    )
    op.create_index(
        op.f("ix_github_conditional_stored_at"), "github_conditional", ["stored_at"], unique=False
    )
    op.create_table(
        "github_rate_budget",
        sa.Column("installation_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("limit", sa.Integer(), nullable=False),
        sa.Column("remaining", sa.Integer(), nullable=False),
        sa.Column("reset_at", sa.Float(), nullable=False),
        sa.Column("blocked_until", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("installation_id"),
    )


def downgrade() -> None:
    op.drop_table("github_rate_budget")
    op.drop_index(op.f("ix_github_conditional_stored_at"), table_name="github_conditional")
    op.drop_table("github_conditional")
