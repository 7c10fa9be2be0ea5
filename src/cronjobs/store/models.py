"""Table definitions (SQLAlchemy Core). The Alembic migrations in `migrations/` create them.

All DateTime columns hold naive UTC. MySQL/MariaDB tables use utf8mb4 and microsecond
DATETIME(6) so ordering by time is exact.

The tables here are what the queries use: columns, types, keys and indexes, which
`tests/test_migrations.py` compares with the migrated database on every backend. The
options that only `CREATE TABLE` reads (InnoDB, utf8mb4 and `utf8mb4_bin` on
MySQL/MariaDB, SQLite's `AUTOINCREMENT`) are the migrations' alone: SQLAlchemy checks a
table's `mysql_*` or `sqlite_*` option by importing that dialect's package, and every
process on another database paid for it: every CLI command and every worker's start
(bench/NOTES.md has the figures). MySQL's `DATETIME(6)` and `LONGTEXT` are named by
`MicrosecondDateTime` and `LongTextType` for the same reason.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    true,
)

from .. import limits
from ..status import Status
from .columns import Id, LongText, UtcDateTime

metadata = MetaData()

STATUSES = tuple(Status)  # the values of `cronjob_queue.status`
TITLE_MAX = limits.TITLE_MAX_CHARS
KEY_MAX = limits.KEY_MAX_CHARS  # utf8mb4 index limit on older MySQL row formats

cronjob_queue = Table(
    "cronjob_queue",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("type", String(191), nullable=False),
    Column("queue", String(limits.QUEUE_MAX_CHARS), nullable=False, server_default="default"),
    Column("status", String(16), nullable=False, server_default=Status.PENDING.value),
    Column("priority", Integer, nullable=False, server_default="5"),
    Column("payload", LongText, nullable=True),
    Column("result_payload", LongText, nullable=True),
    Column("process_logs", LongText, nullable=True),
    Column("error", Text, nullable=True),
    Column("attempts", Integer, nullable=False, server_default="0"),
    # NULL: the dispatcher left it to the handler; the claim sets its MAX_ATTEMPTS (0007).
    Column("max_attempts", Integer, nullable=True),
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
    # Migration 0008: why the worker (not the handler) ended the last run as it did
    # (a `status.Reason` value); NULL for the handler's own outcome.
    Column("outcome_reason", String(limits.REASON_MAX_CHARS), nullable=True),
    # Migration 0009: the value of the handler's LIMIT_KEY (or `limit_key(payload)`),
    # computed at dispatch; NULL: limited by type only.
    Column("limit_key", String(limits.LIMIT_KEY_MAX_CHARS), nullable=True),
    # Migration 0010: the first row of the row's family (a discover's id on each of its
    # descendants; NULL on a row without parent), set at dispatch: the overlap check of a
    # scheduled task asks "is any row of this family pending or running" from the index.
    Column("root_id", Id, nullable=True),
    # Migration 0013: a handler's traceback (its last part, `limits.TRACEBACK_MAX_CHARS`)
    # and the failure's group (`fingerprint`: exception type and normalised text, hashed).
    Column("traceback", Text, nullable=True),
    Column("fingerprint", String(40), nullable=True),
    # Migration 0015: not claimed after this instant (naive UTC); the row ends `expired`
    # (`dispatch(expires_in=...)`, a task's STARTING_DEADLINE). NULL: no deadline.
    Column("expires_at", UtcDateTime, nullable=True),
    # Migration 0019: the row's webhook (`dispatch(callback_url=...)`); NULL: WEBHOOK_URL.
    Column("callback_url", String(limits.URL_MAX_CHARS), nullable=True),
    # Migration 0020: the trace context current at dispatch (W3C `traceparent` and
    # `tracestate` as JSON, `cronjobs.tracing`); NULL without OpenTelemetry or a span.
    Column("trace_context", String(1024), nullable=True),
    UniqueConstraint("idempotency_key", name="uq_cronjob_queue_idempotency_key"),
    Index("ix_cronjob_queue_claim", "queue", "status", "priority", "id"),
    Index("ix_cronjob_queue_status_finished", "status", "finished_at", "type"),  # 0003: + type
    Index("ix_cronjob_queue_parent", "parent_id"),
    Index("ix_cronjob_queue_type", "type"),
    # Dashboard lists (migration 0003): newest-first pages per status, per type and status.
    Index("ix_cronjob_queue_status_id", "status", "id"),  # also recover-stale's (0012)
    Index("ix_cronjob_queue_type_status", "type", "status", "id"),
    # Flow control (0009): rows running per type and limit key (the claim's count).
    Index("ix_cronjob_queue_limit", "status", "type", "limit_key"),
    Index("ix_cronjob_queue_root_status", "root_id", "status", "id"),  # 0010: overlap check
    # 0015: the sweep's "pending rows past their expires_at" (`store.expiry`).
    Index("ix_cronjob_queue_status_expires", "status", "expires_at"),
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
    # Migration 0010: slots the overlap policy started nothing for (never silent): how
    # many, the last one, when, why (`overlap.SKIP_REASONS`); and the one slot a
    # `buffer_one` task keeps waiting behind its running run.
    Column("skipped_count", Integer, nullable=False, server_default="0"),
    Column("last_skipped_slot", String(32), nullable=True),
    Column("last_skipped_at", UtcDateTime, nullable=True),
    Column("last_skip_reason", String(16), nullable=True),
    Column("buffered_slot", String(32), nullable=True),
    # Migration 0016: scheduled runs in a row that failed (reset by a success and by
    # `resume --task`); AUTO_PAUSE_AFTER_FAILURES pauses the task when it reaches N.
    Column("failure_streak", Integer, nullable=False, server_default="0"),
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
)

# One row per completion of a family (migration 0013): a root row and every row under
# it (`root_id`). `generation` counts the completions of one root (1; 2 after failed rows
# were retried and finished again ...). Written, with the callback rows it starts, in the
# transaction that finishes the family's last row (`cronjobs.family.settle`).
cronjob_family = Table(
    "cronjob_family",
    metadata,
    Column("root_id", Id, primary_key=True, autoincrement=False),
    Column("generation", Integer, primary_key=True, autoincrement=False),
    Column("outcome", String(16), nullable=False),  # success | failure | cancelled
    Column("counts", Text, nullable=False),  # JSON: status -> rows, at completion
    Column("completed_at", UtcDateTime, nullable=False),
    Index("ix_cronjob_family_completed", "completed_at"),
)

# A row that waits for others (migration 0013): `job_id` starts once `depends_on_id` has
# finished (a root row: its whole family). Deleted with the waiting row. `allow_failed`
# (0014): a failed or cancelled dependency releases the row too (else it cancels it).
cronjob_dependency = Table(
    "cronjob_dependency",
    metadata,
    Column("job_id", Id, ForeignKey("cronjob_queue.id", ondelete="CASCADE",
                                    name="fk_cronjob_dependency_job"), primary_key=True),
    Column("depends_on_id", Id, primary_key=True, autoincrement=False),
    Column("allow_failed", Boolean, nullable=False, server_default=false()),
    Index("ix_cronjob_dependency_on", "depends_on_id"),
)

# One row per live worker process, refreshed every heartbeat.
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
    # migration 0011: the worker's slots, and which slot runs which job ("id:slot,...")
    Column("slots", Integer, nullable=True),
    Column("job_slots", String(1000), nullable=True),
    Index("ix_cronjob_worker_seen", "last_seen_at"),
)

# Stop requests of an operator (migration 0011): one row per run to stop, `(job_id,
# attempt)`, so a request never reaches a later attempt of the row. The worker that holds
# the run reads them for its running runs every second and ends the job. Deleted with
# the job row.
cronjob_stop = Table(
    "cronjob_stop",
    metadata,
    Column("job_id", Id, ForeignKey("cronjob_queue.id", ondelete="CASCADE",
                                    name="fk_cronjob_stop_job"), primary_key=True),
    Column("attempt", Integer, primary_key=True, autoincrement=False),
    Column("requested_by", String(64), nullable=False),
    Column("requested_at", UtcDateTime, nullable=False),
)

# One row per health problem being watched (alerts; the rules are in
# cronjobs/health/alertstate.py): its state over health runs, its recent state changes
# (flapping), and what was delivered. Deleted once it passes quietly.
cronjob_alert = Table(
    "cronjob_alert",
    metadata,
    Column("problem", String(191), primary_key=True),
    Column("status", String(16), nullable=False),
    Column("message", Text, nullable=False),
    Column("first_seen_at", UtcDateTime, nullable=False),  # the episode's first failing run
    Column("last_seen_at", UtcDateTime, nullable=False),  # the last failing run
    Column("last_sent_at", UtcDateTime, nullable=True),  # the last message about it
    # migration 0005: streaks, flapping, recoveries retried until delivered
    Column("check_name", String(64), nullable=True),  # its check (did that check answer?)
    Column("state", String(8), nullable=False, server_default="fail"),  # fail | pass
    Column("runs", Integer, nullable=False, server_default="1"),  # runs in a row in `state`
    Column("state_since", UtcDateTime, nullable=True),
    Column("changes", Text, nullable=True),  # JSON list of state-change times in the window
    Column("alerted_at", UtcDateTime, nullable=True),  # first delivery; None after recovery
    Column("sending_until", UtcDateTime, nullable=True),  # claimed by a sending pass
)

# Bulk operations (retry now; cancel and delete later) on a snapshot of rows: one row per
# click or `cronjobs failed --retry`. `running_key` is the hash of the selection while the
# operation runs and NULL after: its unique constraint lets one operation run per selection
# (NULLs do not collide on any backend). `lease_until` is on the database's clock.
cronjob_operation = Table(
    "cronjob_operation",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("action", String(32), nullable=False),
    Column("selection", Text, nullable=False),
    Column("running_key", String(64), nullable=True),
    Column("status", String(16), nullable=False),
    Column("total_rows", Integer, nullable=False, server_default="0"),
    Column("done_rows", Integer, nullable=False, server_default="0"),
    Column("changed_rows", Integer, nullable=False, server_default="0"),
    Column("created_by", String(64), nullable=False),
    Column("created_host", String(limits.WORKER_ID_MAX_CHARS), nullable=False),
    Column("owner", String(limits.WORKER_ID_MAX_CHARS), nullable=True),
    Column("lease_until", UtcDateTime, nullable=True),
    Column("error", Text, nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime, nullable=True),
    UniqueConstraint("running_key", name="uq_cronjob_operation_running"),
)

# The snapshot of an operation: its row ids in batches (ascending, comma-separated), taken
# at the click. A batch is deleted in the transaction that applies it, so what is left is
# what is left to do, and a resumed operation goes on where its last commit ended.
cronjob_operation_batch = Table(
    "cronjob_operation_batch",
    metadata,
    Column("operation_id", Id, ForeignKey("cronjob_operation.id", ondelete="CASCADE",
                                          name="fk_cronjob_operation_batch_operation"),
           primary_key=True),
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("ids", Text, nullable=False),
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
)

# Flow control (migration 0009; docs/flow-control.md). A pause of a queue, a job type or a
# scheduled task: its rows (slots) wait until it is resumed or `until_at` passes (NULL:
# until resumed). The claim excludes paused rows in its SELECT.
cronjob_pause = Table(
    "cronjob_pause",
    metadata,
    Column("scope", String(8), primary_key=True),  # queue | type | task
    Column("name", String(191), primary_key=True),
    Column("reason", Text, nullable=True),
    Column("created_by", String(limits.FLOW_BY_MAX_CHARS), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("until_at", UtcDateTime, nullable=True),
)

# A block (flood wait): rows of `type` with `limit_key` (or every row of the type when
# `limit_key` is '') wait until `until_at`. Written by `RetryLater(block=...)` in the
# outcome's transaction; extended, never shortened; expires by itself.
cronjob_block = Table(
    "cronjob_block",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("type", String(191), nullable=False),
    Column("limit_key", String(limits.LIMIT_KEY_MAX_CHARS), nullable=False, server_default=""),
    Column("until_at", UtcDateTime, nullable=False),
    Column("reason", Text, nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    UniqueConstraint("type", "limit_key", name="uq_cronjob_block_type_key"),
)

# One row per limit (`queue:<name>`, `type:<type>`): claimers of a limited queue or type
# lock it FOR UPDATE in the claim's transaction, so they count running rows and starts
# one after the other (never a counter: the counts come from the rows and the start log).
cronjob_limiter = Table(
    "cronjob_limiter",
    metadata,
    Column("name", String(191), primary_key=True),
    Column("created_at", UtcDateTime, nullable=False),
)

# The start log of rate limits: one row per start of a rate-limited row, written by the
# claim; a rate limit counts the starts of its limiter (and key; '' for none) in the
# rolling window. Entries older than the window are pruned by the claim.
cronjob_flow_start = Table(
    "cronjob_flow_start",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("limiter", String(191), nullable=False),
    Column("limit_key", String(limits.LIMIT_KEY_MAX_CHARS), nullable=False, server_default=""),
    Column("started_at", UtcDateTime, nullable=False),
    Index("ix_cronjob_flow_start", "limiter", "limit_key", "started_at"),
)

# Schedule entries added at run time (migration 0017): the entry `<task>:<name>` of the
# handler whose task is `task`, with its cron line, zone (NULL: the handler's or the
# settings'), payload (JSON text) and who made it (`cronjobs.store.schedules`).
cronjob_schedule = Table(
    "cronjob_schedule",
    metadata,
    Column("task", String(126), primary_key=True),  # + ":" + name: 191, as cronjob_runtime.task
    Column("name", String(64), primary_key=True),
    Column("cron", String(64), nullable=False),
    Column("timezone", String(64), nullable=True),
    Column("payload", Text, nullable=False),
    Column("created_by", String(64), nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

# API tokens (migration 0018; docs/api.md): a named token with a scope (read < dispatch <
# operate < admin), stored as the SHA-256 of the token; `revoked_at` set: refused.
cronjob_token = Table(
    "cronjob_token",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("scope", String(16), nullable=False),
    Column("hash", String(64), nullable=False, unique=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("last_used_at", UtcDateTime, nullable=True),
    Column("revoked_at", UtcDateTime, nullable=True),
)

# Webhook deliveries (0019): one per (row, attempt), written with the outcome, body frozen;
# a sender claims them under a lease, POSTs and marks them (`cronjobs.store.webhooks`).
cronjob_webhook = Table(
    "cronjob_webhook",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("job_id", Id, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("url", String(limits.URL_MAX_CHARS), nullable=False),
    Column("status", String(16), nullable=False),
    Column("tries", Integer, nullable=False, server_default="0"),
    Column("next_try_at", UtcDateTime, nullable=False),
    Column("locked_until", UtcDateTime, nullable=True),
    Column("lease_token", String(64), nullable=True),
    Column("last_error", Text, nullable=True),
    Column("last_status_code", Integer, nullable=True),
    Column("body", LongText, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("delivered_at", UtcDateTime, nullable=True),
    UniqueConstraint("job_id", "attempt", name="uq_cronjob_webhook_job_attempt"),
    Index("ix_cronjob_webhook_due", "status", "next_try_at"),
)
