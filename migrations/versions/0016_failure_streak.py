"""Task runs failed in a row: `cronjob_runtime.failure_streak`.

How many scheduled runs of a task in a row failed (a discover's outcome is its family's);
a success sets it back to 0, and so does `cronjobs resume --task`. A handler's
`AUTO_PAUSE_AFTER_FAILURES` pauses the task when it reaches that many.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""
import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("cronjob_runtime", sa.Column("failure_streak", sa.Integer, nullable=False,
                                               server_default="0"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE cronjob_runtime DROP COLUMN failure_streak")  # SQLite >= 3.35
    else:
        op.drop_column("cronjob_runtime", "failure_streak")
