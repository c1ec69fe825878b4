"""delivery reconciler: scan position and redelivery requests

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30 14:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('delivery_scans',
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('high_water', sa.Float(), nullable=True),
    sa.Column('resume_cursor', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('scan_newest', sa.Float(), nullable=True),
    sa.Column('lease_holder', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('lease_until', sa.Float(), nullable=False),
    sa.Column('not_before', sa.Float(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('webhook_redeliveries',
    sa.Column('guid', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('github_id', sa.BigInteger(), nullable=False),
    sa.Column('event', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('action', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('delivered_at', sa.Float(), nullable=False),
    sa.Column('state', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('requests', sa.Integer(), nullable=False),
    sa.Column('requested_at', sa.Float(), nullable=True),
    sa.Column('detail', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('first_seen_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('guid')
    )
    with op.batch_alter_table('webhook_redeliveries', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_webhook_redeliveries_state'), ['state'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('webhook_redeliveries', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_webhook_redeliveries_state'))
    op.drop_table('webhook_redeliveries')
    op.drop_table('delivery_scans')
