"""Schedules stored at run time: `cronjob_schedule`.

One row per entry of a handler's schedules added at run time (`cronjobs schedules add`,
the dashboard's Schedules section, `POST /api/schedules`): the handler's task, the entry's
name (the entry is the task `<task>:<name>`), its cron line, its zone (NULL: the
handler's or the settings'), its payload (JSON text), who made it and when. Removing an
entry deletes its row; its runs and its runtime row stay.

Revision ID: 0017
Revises: 0016
Create Date: 2027-02-20
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

UtcDateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "cronjob_schedule",
        sa.Column("task", sa.String(126), primary_key=True),
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("cron", sa.String(64), nullable=False),
        sa.Column("timezone", sa.String(64), nullable=True),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("created_by", sa.String(64), nullable=True),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        mysql_engine="InnoDB", mysql_charset="utf8mb4", mysql_collate="utf8mb4_bin",
    )


def downgrade() -> None:
    op.drop_table("cronjob_schedule")
