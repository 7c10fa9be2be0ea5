"""Signed webhooks: `cronjob_queue.callback_url` and `cronjob_webhook`.

`callback_url` is the row's own webhook (`dispatch(callback_url=...)`; NULL: the
handler's `WEBHOOK_URL`, if any). `cronjob_webhook` holds one delivery per (row,
attempt), inserted in the transaction that writes the attempt's outcome, with the body
frozen then; a worker's sender claims due deliveries under a lease (`locked_until`,
`lease_token`), POSTs them, and marks them `delivered` or schedules the next try.

Revision ID: 0019
Revises: 0018
Create Date: 2027-03-01
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

UtcDateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
LongText = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    # A nullable column at the end: no table copy on MariaDB (instant) or PostgreSQL.
    op.add_column("cronjob_queue", sa.Column("callback_url", sa.String(2048), nullable=True))
    op.create_table(
        "cronjob_webhook",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("job_id", Id, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("tries", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_try_at", UtcDateTime, nullable=False),
        sa.Column("locked_until", UtcDateTime, nullable=True),
        sa.Column("lease_token", sa.String(64), nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("last_status_code", sa.Integer, nullable=True),
        sa.Column("body", LongText, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("delivered_at", UtcDateTime, nullable=True),
        sa.UniqueConstraint("job_id", "attempt", name="uq_cronjob_webhook_job_attempt"),
        sa.Index("ix_cronjob_webhook_due", "status", "next_try_at"),
        mysql_engine="InnoDB", mysql_charset="utf8mb4", mysql_collate="utf8mb4_bin",
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    op.drop_table("cronjob_webhook")
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE cronjob_queue DROP COLUMN callback_url")  # SQLite >= 3.35
    else:
        op.drop_column("cronjob_queue", "callback_url")
