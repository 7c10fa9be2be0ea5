"""Bulk operations: one row per bulk action (retry now; cancel and delete later) and the
snapshot of its row ids in batches.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UtcDateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    op.create_table(
        "cronjob_operation",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("selection", sa.Text, nullable=False),
        # sha256 of the selection while the operation runs, NULL after: one running per selection
        sa.Column("running_key", sa.String(64), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("total_rows", sa.Integer, nullable=False, server_default="0"),
        sa.Column("done_rows", sa.Integer, nullable=False, server_default="0"),
        sa.Column("changed_rows", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_by", sa.String(64), nullable=False),
        sa.Column("created_host", sa.String(128), nullable=False),
        sa.Column("owner", sa.String(128), nullable=True),
        sa.Column("lease_until", UtcDateTime, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        sa.Column("finished_at", UtcDateTime, nullable=True),
        sa.UniqueConstraint("running_key", name="uq_cronjob_operation_running"),
        sqlite_autoincrement=True,
        **MYSQL,
    )
    op.create_table(
        "cronjob_operation_batch",
        sa.Column("operation_id", Id, sa.ForeignKey(
            "cronjob_operation.id", ondelete="CASCADE",
            name="fk_cronjob_operation_batch_operation"), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("ids", sa.Text, nullable=False),
        **MYSQL,
    )


def downgrade() -> None:
    op.drop_table("cronjob_operation_batch")
    op.drop_table("cronjob_operation")
