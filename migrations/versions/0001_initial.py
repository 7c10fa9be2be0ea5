"""Initial schema: cronjob_queue, cronjob_runtime, cronjob_slot.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UtcDateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
LongText = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    op.create_table(
        "cronjob_queue",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("type", sa.String(191), nullable=False),
        sa.Column("queue", sa.String(64), nullable=False, server_default="default"),
        sa.Column("status", sa.String(16), nullable=False, server_default="pending"),
        sa.Column("priority", sa.Integer, nullable=False, server_default="5"),
        sa.Column("payload", LongText, nullable=True),
        sa.Column("result_payload", LongText, nullable=True),
        sa.Column("process_logs", LongText, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("max_attempts", sa.Integer, nullable=False, server_default="3"),
        sa.Column("idempotency_key", sa.String(191), nullable=True),
        sa.Column("parent_id", Id, nullable=True),
        sa.Column("title", sa.String(255), nullable=True),
        sa.Column("scheduled_at", UtcDateTime, nullable=True),
        sa.Column("started_at", UtcDateTime, nullable=True),
        sa.Column("finished_at", UtcDateTime, nullable=True),
        sa.Column("locked_until", UtcDateTime, nullable=True),
        sa.Column("worker_id", sa.String(128), nullable=True),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        sa.ForeignKeyConstraint(["parent_id"], ["cronjob_queue.id"], ondelete="CASCADE",
                                name="fk_cronjob_queue_parent"),
        sa.UniqueConstraint("idempotency_key", name="uq_cronjob_queue_idempotency_key"),
        sqlite_autoincrement=True,  # never reuse the id of a deleted row
        **MYSQL,
    )
    op.create_index("ix_cronjob_queue_claim", "cronjob_queue",
                    ["queue", "status", "priority", "id"])
    op.create_index("ix_cronjob_queue_status_locked", "cronjob_queue", ["status", "locked_until"])
    op.create_index("ix_cronjob_queue_status_finished", "cronjob_queue", ["status", "finished_at"])
    op.create_index("ix_cronjob_queue_parent", "cronjob_queue", ["parent_id"])
    op.create_index("ix_cronjob_queue_type", "cronjob_queue", ["type"])
    op.create_table(
        "cronjob_runtime",
        sa.Column("task", sa.String(191), primary_key=True),
        sa.Column("type", sa.String(191), nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("frequency", sa.String(64), nullable=True),
        sa.Column("last_run_at", UtcDateTime, nullable=True),
        sa.Column("next_run_at", UtcDateTime, nullable=True),
        sa.Column("last_slot", sa.String(32), nullable=True),
        sa.Column("last_job_id", sa.BigInteger, nullable=True),
        sa.Column("last_status", sa.String(16), nullable=True),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        **MYSQL,
    )
    op.create_table(
        "cronjob_slot",
        sa.Column("task", sa.String(191), primary_key=True),
        sa.Column("slot", sa.String(32), primary_key=True),
        sa.Column("job_id", sa.BigInteger, nullable=True),
        sa.Column("claimed_at", UtcDateTime, nullable=False),
        **MYSQL,
    )
    op.create_index("ix_cronjob_slot_claimed", "cronjob_slot", ["claimed_at"])


def downgrade() -> None:
    op.drop_table("cronjob_slot")
    op.drop_table("cronjob_runtime")
    op.drop_table("cronjob_queue")
