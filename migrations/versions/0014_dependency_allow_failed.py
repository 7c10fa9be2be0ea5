"""Dependencies: `cronjob_dependency.allow_failed`.

A dependency dispatched with `allow_failed=True` releases its row whatever the dependency
ended as; with False (the default) a failed or cancelled dependency cancels the row
(reason `dependency_failed`, no attempt used).

Revision ID: 0014
Revises: 0013
Create Date: 2027-02-11
"""
import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("cronjob_dependency", sa.Column("allow_failed", sa.Boolean, nullable=False,
                                                  server_default=sa.false()))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE cronjob_dependency DROP COLUMN allow_failed")  # SQLite >= 3.35
    else:
        op.drop_column("cronjob_dependency", "allow_failed")
