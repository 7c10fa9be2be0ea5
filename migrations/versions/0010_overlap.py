"""Overlap policy of scheduled tasks: skipped and buffered slots, and a job row's family root.

`cronjob_runtime` gains what the scheduler records when a slot starts nothing because
the previous run (for a discover: its whole family) is still pending or running:
`skipped_count`, `last_skipped_slot`, `last_skipped_at`, `last_skip_reason` (`running`,
`buffered`, `paused`), and `buffered_slot`, the one slot an `OVERLAP = "buffer_one"`
task keeps waiting behind the running one.

`cronjob_queue.root_id` is the first row of a row's family (a discover's id on every
descendant; NULL on a row without parent), set at dispatch, with an index on
`(root_id, status, id)` so "is any row of this family pending or running" reads only the
index entries of the family's live rows, however large the table. Rows still pending or
running when this revision runs get their parent as root (exact for discover -> execute,
the usual two levels).

Revision ID: 0010
Revises: 0008
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0010"
down_revision = "0009"  # re-chained after 0009 (flow control) in this branch
branch_labels = None
depends_on = None

UtcDateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    # Nullable columns (and one with a constant default) at the end: no table copy on
    # MariaDB (instant) or PostgreSQL.
    op.add_column("cronjob_runtime", sa.Column("skipped_count", sa.Integer, nullable=False,
                                               server_default="0"))
    op.add_column("cronjob_runtime", sa.Column("last_skipped_slot", sa.String(32),
                                               nullable=True))
    op.add_column("cronjob_runtime", sa.Column("last_skipped_at", UtcDateTime, nullable=True))
    op.add_column("cronjob_runtime", sa.Column("last_skip_reason", sa.String(16),
                                               nullable=True))
    op.add_column("cronjob_runtime", sa.Column("buffered_slot", sa.String(32), nullable=True))
    op.add_column("cronjob_queue", sa.Column("root_id", Id, nullable=True))
    # Only live rows matter to the overlap check: finished ones keep NULL (no full-table
    # UPDATE on a big table).
    op.execute("UPDATE cronjob_queue SET root_id = parent_id WHERE parent_id IS NOT NULL "
               "AND status IN ('pending', 'running')")
    op.create_index("ix_cronjob_queue_root_status", "cronjob_queue", ["root_id", "status", "id"])


def downgrade() -> None:
    op.drop_index("ix_cronjob_queue_root_status", table_name="cronjob_queue")
    if op.get_bind().dialect.name == "sqlite":  # no table copy of the queue (SQLite >= 3.35)
        op.execute("ALTER TABLE cronjob_queue DROP COLUMN root_id")
    else:
        op.drop_column("cronjob_queue", "root_id")
    with op.batch_alter_table("cronjob_runtime") as batch:
        batch.drop_column("buffered_slot")
        batch.drop_column("last_skip_reason")
        batch.drop_column("last_skipped_at")
        batch.drop_column("last_skipped_slot")
        batch.drop_column("skipped_count")
