"""Drop `ix_cronjob_queue_status_locked`.

Every claim, finish and lease renewal moves a row's entry in `(status, locked_until)`; the
index served only recover-stale's `status = 'running' AND locked_until < ...  ORDER BY id`,
which `ix_cronjob_queue_status_id` serves as well: it reads the `running` rows (at most the
workers' slots, plus the stale ones) in id order. A 2x8 no-op drain on MariaDB without it:
+2.2 % (docs/performance.md). A database not migrated yet runs as before.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_cronjob_queue_status_locked", table_name="cronjob_queue")


def downgrade() -> None:
    op.create_index("ix_cronjob_queue_status_locked", "cronjob_queue", ["status", "locked_until"])
