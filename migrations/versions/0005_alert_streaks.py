"""Alerts: failing/passing streaks, flap detection, recoveries retried until delivered.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-10
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

UtcDateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("cronjob_alert") as batch:
        batch.add_column(sa.Column("check_name", sa.String(64), nullable=True))
        batch.add_column(sa.Column("state", sa.String(8), nullable=False, server_default="fail"))
        batch.add_column(sa.Column("runs", sa.Integer, nullable=False, server_default="1"))
        batch.add_column(sa.Column("state_since", UtcDateTime, nullable=True))
        batch.add_column(sa.Column("changes", sa.Text, nullable=True))
        batch.add_column(sa.Column("alerted_at", UtcDateTime, nullable=True))
        batch.add_column(sa.Column("sending_until", UtcDateTime, nullable=True))
    # open problems carry over: failing since they were first seen, alerted if a message went
    op.execute("UPDATE cronjob_alert SET state_since = first_seen_at, alerted_at = last_sent_at")


def downgrade() -> None:
    with op.batch_alter_table("cronjob_alert") as batch:
        for column in ("sending_until", "alerted_at", "changes", "state_since", "runs", "state",
                       "check_name"):
            batch.drop_column(column)
