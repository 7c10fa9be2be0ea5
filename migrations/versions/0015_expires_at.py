"""Deadlines: `cronjob_queue.expires_at`.

A row not started by its `expires_at` (naive UTC) is never claimed: the worker's sweep
ends it `expired` (no attempt used, `handle()` never called). Set by
`dispatch(expires_at=/expires_in=)` and by a task's STARTING_DEADLINE for its slot rows.
`ix_cronjob_queue_status_expires` serves the sweep's "pending rows past their deadline".

Revision ID: 0015
Revises: 0014
Create Date: 2027-02-12
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

UtcDateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    # A nullable column at the end: no table copy on MariaDB (instant) or PostgreSQL.
    op.add_column("cronjob_queue", sa.Column("expires_at", UtcDateTime, nullable=True))
    op.create_index("ix_cronjob_queue_status_expires", "cronjob_queue",
                    ["status", "expires_at"])


def downgrade() -> None:
    op.drop_index("ix_cronjob_queue_status_expires", table_name="cronjob_queue")
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE cronjob_queue DROP COLUMN expires_at")  # SQLite >= 3.35
    else:
        op.drop_column("cronjob_queue", "expires_at")
