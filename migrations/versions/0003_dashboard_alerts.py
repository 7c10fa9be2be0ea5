"""Dashboard and health: alert state, separate manual-run columns, worker memory, list indexes.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

UtcDateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    op.create_table(
        "cronjob_alert",
        sa.Column("problem", sa.String(191), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("first_seen_at", UtcDateTime, nullable=False),
        sa.Column("last_seen_at", UtcDateTime, nullable=False),
        sa.Column("last_sent_at", UtcDateTime, nullable=True),
        **MYSQL,
    )
    op.add_column("cronjob_runtime", sa.Column("last_success_at", UtcDateTime, nullable=True))
    op.add_column("cronjob_runtime", sa.Column("last_manual_at", UtcDateTime, nullable=True))
    op.add_column("cronjob_runtime", sa.Column("last_manual_job_id", sa.BigInteger, nullable=True))
    op.add_column("cronjob_worker", sa.Column("memory_mb", sa.Float, nullable=True))
    op.create_index("ix_cronjob_queue_status_id", "cronjob_queue", ["status", "id"])
    # (status, finished_at) gains `type`: the Queue page's execute throughput is then
    # counted from the index alone (cleanup's range reads use the same prefix).
    op.drop_index("ix_cronjob_queue_status_finished", table_name="cronjob_queue")
    op.create_index("ix_cronjob_queue_status_finished", "cronjob_queue",
                    ["status", "finished_at", "type"])
    op.create_index("ix_cronjob_queue_type_status", "cronjob_queue", ["type", "status", "id"])


def downgrade() -> None:
    op.drop_index("ix_cronjob_queue_status_finished", table_name="cronjob_queue")
    op.create_index("ix_cronjob_queue_status_finished", "cronjob_queue", ["status", "finished_at"])
    op.drop_index("ix_cronjob_queue_type_status", table_name="cronjob_queue")
    op.drop_index("ix_cronjob_queue_status_id", table_name="cronjob_queue")
    with op.batch_alter_table("cronjob_worker") as batch:
        batch.drop_column("memory_mb")
    with op.batch_alter_table("cronjob_runtime") as batch:
        batch.drop_column("last_manual_job_id")
        batch.drop_column("last_manual_at")
        batch.drop_column("last_success_at")
    op.drop_table("cronjob_alert")
