"""outbox relays: a re-dispatched job gets a fresh id and a backoff

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 14:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('outbox', schema=None) as batch_op:
        batch_op.add_column(sa.Column('relays', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('relay_at', sa.Float(), nullable=False, server_default='0'))
        batch_op.create_index(batch_op.f('ix_outbox_relay_at'), ['relay_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('outbox', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_outbox_relay_at'))
        batch_op.drop_column('relay_at')
        batch_op.drop_column('relays')
