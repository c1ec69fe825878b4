"""evidence blobs in the database

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 14:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('evidence_blobs',
    sa.Column('sha256', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('size', sa.Integer(), nullable=False),
    sa.Column('original_size', sa.Integer(), nullable=False),
    sa.Column('encoding', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('data', sa.LargeBinary(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('last_put_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('sha256')
    )
    with op.batch_alter_table('evidence_blobs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_evidence_blobs_last_put_at'), ['last_put_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('evidence_blobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_evidence_blobs_last_put_at'))

    op.drop_table('evidence_blobs')
