"""`cronjob_queue.max_attempts` may be NULL: a row dispatched without `max_attempts` gets
its handler's MAX_ATTEMPTS when a worker that knows the handler claims it. Existing rows
keep their values; the server default (3) goes, so a row inserted without the column is
unset too. Downgrade: unset rows get 3 again.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-09
"""
import re

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_NOT_NULL = re.compile(r"max_attempts\s+INTEGER\s+(DEFAULT\s+'?3'?\s+)?NOT\s+NULL", re.I)
_NULLABLE = re.compile(r"max_attempts\s+INTEGER\s*,", re.I)


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_schema(_NOT_NULL, "max_attempts INTEGER")
        return
    op.alter_column("cronjob_queue", "max_attempts", existing_type=sa.Integer(), nullable=True,
                    server_default=None, existing_server_default=sa.text("3"))


def downgrade() -> None:
    op.execute("UPDATE cronjob_queue SET max_attempts = 3 WHERE max_attempts IS NULL")
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_schema(_NULLABLE, "max_attempts INTEGER DEFAULT '3' NOT NULL,")
        return
    op.alter_column("cronjob_queue", "max_attempts", existing_type=sa.Integer(), nullable=False,
                    server_default=sa.text("3"))


def _sqlite_schema(pattern: re.Pattern, replacement: str) -> None:
    """Change the column's NOT NULL and default in the stored CREATE TABLE text: SQLite's
    documented procedure for changes that leave the stored rows as they are
    (sqlite.org/lang_altertable.html, "Making other kinds of table schema changes").

    Batch mode's copy-and-rename would lose rows: with foreign keys on (cronjobs' engine;
    the pragma cannot change inside the migration's transaction), dropping the old table
    cascades to the copied children through the self-referencing `parent_id`, and the
    copy loses AUTOINCREMENT (ids of deleted rows would be reused).
    """
    conn = op.get_bind()
    sql = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE type = 'table' "
                               "AND name = 'cronjob_queue'").scalar_one()
    changed, count = pattern.subn(replacement, sql, count=1)
    if count != 1:
        raise RuntimeError(f"cronjob_queue.max_attempts is not as expected in: {sql}")
    version = conn.exec_driver_sql("PRAGMA schema_version").scalar_one()
    conn.exec_driver_sql("PRAGMA writable_schema = ON")
    conn.exec_driver_sql("UPDATE sqlite_master SET sql = ? WHERE type = 'table' "
                         "AND name = 'cronjob_queue'", (changed,))
    conn.exec_driver_sql(f"PRAGMA schema_version = {int(version) + 1}")
    conn.exec_driver_sql("PRAGMA writable_schema = OFF")
