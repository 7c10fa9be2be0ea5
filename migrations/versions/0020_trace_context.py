"""Tracing: `cronjob_queue.trace_context`.

The trace context current when the row was dispatched (W3C `traceparent` and `tracestate`
as compact JSON, `cronjobs.tracing`), read by the worker to run the job in a span of the
same trace. NULL when OpenTelemetry is not installed or no span was current.

Revision ID: 0020
Revises: 0019
Create Date: 2027-03-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A nullable column at the end: no table copy on MariaDB (instant) or PostgreSQL.
    op.add_column("cronjob_queue", sa.Column("trace_context", sa.String(1024), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE cronjob_queue DROP COLUMN trace_context")  # SQLite >= 3.35
    else:
        op.drop_column("cronjob_queue", "trace_context")
