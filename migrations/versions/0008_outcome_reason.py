"""Job rows: `outcome_reason`, why the worker (not the handler) ended a run as it did.

A `cronjobs.status.Reason` value (`timeout.killed`, `process_died`, `cut_off.recycle`,
...), written in the same UPDATE as the outcome; NULL for the handler's own outcome and
for rows written before this revision.

Revision ID: 0008
Revises: 0007
Create Date: 2027-01-12
"""
import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A nullable column at the end: no table copy on MariaDB (instant) or PostgreSQL.
    op.add_column("cronjob_queue", sa.Column("outcome_reason", sa.String(32), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE cronjob_queue DROP COLUMN outcome_reason")  # SQLite >= 3.35
    else:
        op.drop_column("cronjob_queue", "outcome_reason")
