"""Flow control: the limit key of a job row, pauses, blocks, limiters and the start log.

- `cronjob_queue.limit_key`: the handler's LIMIT_KEY value, computed at dispatch; an index
  on (status, type, limit_key) serves the claim's count of running rows per key;
- `cronjob_pause`: paused queues, types and tasks (until resumed or `until_at`);
- `cronjob_block`: blocked types and keys (flood waits) until `until_at`;
- `cronjob_limiter`: one row per limit, locked by its claimers in the claim transaction;
- `cronjob_flow_start`: the start log of rate limits (rolling window).

Revision ID: 0009
Revises: 0008
Create Date: 2027-01-20
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UtcDateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    op.add_column("cronjob_queue", sa.Column("limit_key", sa.String(191), nullable=True))
    op.create_index("ix_cronjob_queue_limit", "cronjob_queue", ["status", "type", "limit_key"])
    op.create_table(
        "cronjob_pause",
        sa.Column("scope", sa.String(8), primary_key=True),
        sa.Column("name", sa.String(191), primary_key=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("created_by", sa.String(64), nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("until_at", UtcDateTime, nullable=True),
        **MYSQL,
    )
    op.create_table(
        "cronjob_block",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("type", sa.String(191), nullable=False),
        sa.Column("limit_key", sa.String(191), nullable=False, server_default=""),
        sa.Column("until_at", UtcDateTime, nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.UniqueConstraint("type", "limit_key", name="uq_cronjob_block_type_key"),
        sqlite_autoincrement=True,
        **MYSQL,
    )
    op.create_table(
        "cronjob_limiter",
        sa.Column("name", sa.String(191), primary_key=True),
        sa.Column("created_at", UtcDateTime, nullable=False),
        **MYSQL,
    )
    op.create_table(
        "cronjob_flow_start",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("limiter", sa.String(191), nullable=False),
        sa.Column("limit_key", sa.String(191), nullable=False, server_default=""),
        sa.Column("started_at", UtcDateTime, nullable=False),
        sqlite_autoincrement=True,
        **MYSQL,
    )
    op.create_index("ix_cronjob_flow_start", "cronjob_flow_start",
                    ["limiter", "limit_key", "started_at"])


def downgrade() -> None:
    op.drop_table("cronjob_flow_start")
    op.drop_table("cronjob_limiter")
    op.drop_table("cronjob_block")
    op.drop_table("cronjob_pause")
    op.drop_index("ix_cronjob_queue_limit", table_name="cronjob_queue")
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE cronjob_queue DROP COLUMN limit_key")  # SQLite >= 3.35
    else:
        op.drop_column("cronjob_queue", "limit_key")
