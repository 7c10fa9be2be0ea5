"""Worker heartbeats: cronjob_worker.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

UtcDateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    op.create_table(
        "cronjob_worker",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("queues", sa.String(1000), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("started_at", UtcDateTime, nullable=False),
        sa.Column("last_seen_at", UtcDateTime, nullable=False),
        sa.Column("jobs_done", sa.Integer, nullable=False, server_default="0"),
        sa.Column("current_jobs", sa.String(1000), nullable=True),
        **MYSQL,
    )
    op.create_index("ix_cronjob_worker_seen", "cronjob_worker", ["last_seen_at"])


def downgrade() -> None:
    op.drop_table("cronjob_worker")
