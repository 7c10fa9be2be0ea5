"""Every SQL statement cronjobs runs lives in this package, split by noun.

- `sql`: the dialect differences, and the due condition and the lease expression, each
  written once;
- `insert` (one row / many), `claim` (by queue or id, lease renewal: the one policy
  point of what a worker may take), `finish` (one outcome / many, the delete of a
  cancelled row), `jobs` (reads): the job row's life, driver SQL on the hot path;
- `maintenance` (rescue stale rows, undelivered rows, prune), `runtime` (tasks and slot
  claims), `workers` (heartbeats), and the dashboard's `views`, `queues` (reads per
  queue), `stats`, `actions`, `operations`, `selection`, `alerts`, `fields`, `secrets`;
  `flow` (pauses, blocks, what waits behind them), `held` (the rows they hold, bounded,
  for metrics, health and the dashboard), `rates` (the rate rule: the start log, what a
  rate limit admits now), `stops` (an operator's stop requests), `schedules` (schedule
  entries stored at run time), `expiry` (pending rows past their `expires_at` end
  `expired`).

Functions take a `Connection` (inside a transaction the caller owns) and, where time
matters, a `now` (naive UTC) bound as a parameter, never the database's NOW(), so a
frozen clock drives every backend the same way (leases and heartbeats excepted: they use
the database's clock, `sql.db_now`).
"""

from . import (  # dashboard reads, operator actions, bulk operations, alert state
    actions,
    alerts,
    expiry,
    fields,
    flow,
    held,
    operations,
    queues,
    rates,
    schedules,
    secrets,
    selection,
    stops,
    views,
    webhooks,
)
from .claim import Claim, ClaimPolicy, ClaimRequest, HandlerTerms, claim_jobs
from .finish import delete_job, finish_job, finish_many
from .flow import (
    block,
    is_task_paused,
    list_blocks,
    list_pauses,
    pause,
    prune_expired,
    resume,
    unblock,
)
from .insert import insert_job, insert_jobs, insert_new_direct, insert_new_sqlite
from .jobs import (
    JOB_COLUMNS,
    count_children,
    family_roots,
    get_children,
    get_job,
    live_in_families,
    select_by_key,
)
from .leases import renew_leases
from .limiter import FlowControl
from .maintenance import (
    count_prunable,
    due_pending,
    pending_by_queue,
    prune,
    prune_slots,
    rescue_stale,
)
from .runtime import (
    buffer_slot,
    claim_slot,
    claim_slots,
    ensure_runtimes,
    get_runtime,
    list_runtimes,
    lock_runtime,
    record_run,
    record_runs,
    record_skips,
    set_enabled,
    slot_jobs,
    update_task_status,
)
from .sql import database_now, db_now
from .workers import beat, forget, list_workers, prune_workers, running_by_worker

__all__ = [
    "webhooks",
    "JOB_COLUMNS", "Claim", "ClaimPolicy", "ClaimRequest", "HandlerTerms", "claim_jobs",
    "count_children", "family_roots", "get_children",
    "delete_job", "finish_job", "finish_many", "get_job", "insert_job", "insert_jobs",
    "insert_new_direct", "insert_new_sqlite", "renew_leases", "select_by_key", "due_pending",
    "pending_by_queue",
    "prune", "prune_slots", "count_prunable",
    "rescue_stale", "claim_slot", "claim_slots", "record_runs", "ensure_runtimes",
    "get_runtime", "list_runtimes", "record_run", "set_enabled", "slot_jobs",
    "update_task_status", "beat",
    "forget", "list_workers", "prune_workers", "running_by_worker", "database_now", "db_now",
    "lock_runtime",
    "actions", "alerts", "expiry", "fields", "operations", "flow", "pause", "resume", "list_pauses",
    "is_task_paused", "block", "unblock", "list_blocks", "prune_expired",
    "queues", "secrets", "selection", "stops", "views", "FlowControl", "held", "rates",
    "live_in_families", "record_skips", "buffer_slot",
    "schedules",
]
