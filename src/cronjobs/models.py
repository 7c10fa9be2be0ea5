"""Table definitions (SQLAlchemy Core). The Alembic migrations in `migrations/` create them.

All DateTime columns hold naive UTC. MySQL/MariaDB tables use utf8mb4 and microsecond
DATETIME(6) so ordering by time is exact.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    true,
)
from sqlalchemy.dialects import mysql

from . import limits

metadata = MetaData()

# SQLite only auto-increments an INTEGER PRIMARY KEY; BIGINT elsewhere.
Id = BigInteger().with_variant(Integer(), "sqlite")
# Microsecond precision on MySQL/MariaDB (plain DATETIME drops fractions).
UtcDateTime = DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
LongText = Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")

MYSQL_TABLE_ARGS = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4",
                    "mysql_collate": "utf8mb4_bin"}

STATUSES = ("pending", "running", "completed", "failed", "cancelled")
TITLE_MAX = limits.TITLE_MAX_CHARS
KEY_MAX = limits.KEY_MAX_CHARS  # utf8mb4 index limit on older MySQL row formats

cronjob_queue = Table(
    "cronjob_queue",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("type", String(191), nullable=False),
    Column("queue", String(limits.QUEUE_MAX_CHARS), nullable=False, server_default="default"),
    Column("status", String(16), nullable=False, server_default="pending"),
    Column("priority", Integer, nullable=False, server_default="5"),
    Column("payload", LongText, nullable=True),
    Column("result_payload", LongText, nullable=True),
    Column("process_logs", LongText, nullable=True),
    Column("error", Text, nullable=True),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("max_attempts", Integer, nullable=False, server_default="3"),
    Column("idempotency_key", String(KEY_MAX), nullable=True),
    Column("parent_id", Id, ForeignKey("cronjob_queue.id", ondelete="CASCADE",
                                       name="fk_cronjob_queue_parent"), nullable=True),
    Column("title", String(TITLE_MAX), nullable=True),
    Column("scheduled_at", UtcDateTime, nullable=True),
    Column("started_at", UtcDateTime, nullable=True),
    Column("finished_at", UtcDateTime, nullable=True),
    Column("locked_until", UtcDateTime, nullable=True),
    Column("worker_id", String(limits.WORKER_ID_MAX_CHARS), nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    UniqueConstraint("idempotency_key", name="uq_cronjob_queue_idempotency_key"),
    Index("ix_cronjob_queue_claim", "queue", "status", "priority", "id"),
    Index("ix_cronjob_queue_status_locked", "status", "locked_until"),
    Index("ix_cronjob_queue_status_finished", "status", "finished_at", "type"),  # 0003: + type
    Index("ix_cronjob_queue_parent", "parent_id"),
    Index("ix_cronjob_queue_type", "type"),
    # Dashboard lists (migration 0003): newest-first pages per status, per type and status.
    Index("ix_cronjob_queue_status_id", "status", "id"),
    Index("ix_cronjob_queue_type_status", "type", "status", "id"),
    sqlite_autoincrement=True,  # never reuse the id of a deleted row
    **MYSQL_TABLE_ARGS,
)

cronjob_runtime = Table(
    "cronjob_runtime",
    metadata,
    Column("task", String(191), primary_key=True),
    Column("type", String(191), nullable=False),
    Column("enabled", Boolean, nullable=False, server_default=true()),
    Column("frequency", String(64), nullable=True),
    Column("last_run_at", UtcDateTime, nullable=True),
    Column("next_run_at", UtcDateTime, nullable=True),
    Column("last_slot", String(32), nullable=True),
    Column("last_job_id", BigInteger, nullable=True),
    Column("last_status", String(16), nullable=True),
    Column("updated_at", UtcDateTime, nullable=False),
    # Migration 0003: the last run that ended well (overdue check), and the last manual
    # run kept apart from the scheduled one (last_run_at/last_job_id/last_status).
    Column("last_success_at", UtcDateTime, nullable=True),
    Column("last_manual_at", UtcDateTime, nullable=True),
    Column("last_manual_job_id", BigInteger, nullable=True),
    **MYSQL_TABLE_ARGS,
)

# One row per (task, slot) that was started: the database's proof that a slot ran,
# which survives the deletion of a cancelled childless job row.
cronjob_slot = Table(
    "cronjob_slot",
    metadata,
    Column("task", String(191), primary_key=True),
    Column("slot", String(32), primary_key=True),
    Column("job_id", BigInteger, nullable=True),
    Column("claimed_at", UtcDateTime, nullable=False),
    Index("ix_cronjob_slot_claimed", "claimed_at"),
    **MYSQL_TABLE_ARGS,
)

# One row per live worker process, refreshed every heartbeat (SPEC §7).
cronjob_worker = Table(
    "cronjob_worker",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("queues", String(1000), nullable=False),
    Column("status", String(16), nullable=False),
    Column("started_at", UtcDateTime, nullable=False),
    Column("last_seen_at", UtcDateTime, nullable=False),
    Column("jobs_done", Integer, nullable=False, server_default="0"),
    Column("current_jobs", String(1000), nullable=True),
    Column("memory_mb", Float, nullable=True),  # migration 0003: shown on the Workers page
    Index("ix_cronjob_worker_seen", "last_seen_at"),
    **MYSQL_TABLE_ARGS,
)

# One row per open health problem (SPEC §9 alerts): when it was first seen, and when an
# alert about it was last sent (at most once an hour); deleted when the problem clears.
cronjob_alert = Table(
    "cronjob_alert",
    metadata,
    Column("problem", String(191), primary_key=True),
    Column("status", String(16), nullable=False),
    Column("message", Text, nullable=False),
    Column("first_seen_at", UtcDateTime, nullable=False),
    Column("last_seen_at", UtcDateTime, nullable=False),
    Column("last_sent_at", UtcDateTime, nullable=True),
    **MYSQL_TABLE_ARGS,
)

# Secrets made once per database and shared by every process (migration 0004): the
# dashboard token generated when none is configured, so that two dashboards on one
# database sign and accept the same session cookies.
cronjob_secret = Table(
    "cronjob_secret",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", String(255), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    **MYSQL_TABLE_ARGS,
)
