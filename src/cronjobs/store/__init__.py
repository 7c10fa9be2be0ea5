"""Every SQL statement cronjobs runs lives in this package.

Functions take a `Connection` (inside a transaction the caller owns) and, where time
matters, a `now` (naive UTC) bound as a parameter, never the database's NOW(), so a
frozen clock drives every backend the same way. Dialect differences are handled here.
"""

from . import (  # dashboard reads, operator actions, bulk operations, alert state
    actions,
    alerts,
    fields,
    operations,
    secrets,
    views,
)
from .dialect import database_now, db_now
from .jobs import (
    JOB_COLUMNS,
    claim_batch,
    claim_by_id,
    claim_next,
    count_children,
    delete_job,
    finish_job,
    finish_many,
    get_job,
    insert_job,
    insert_jobs,
    list_jobs,
    renew_leases,
    select_by_key,
)
from .maintenance import due_pending, pending_by_queue, prune, prune_slots, rescue_stale
from .runtime import (
    claim_slot,
    claim_slots,
    ensure_runtime,
    ensure_runtimes,
    get_runtime,
    list_runtimes,
    lock_runtime,
    record_run,
    record_runs,
    set_enabled,
    update_task_status,
)
from .workers import beat, forget, list_workers, prune_workers

__all__ = [
    "JOB_COLUMNS", "claim_batch", "claim_by_id", "claim_next", "count_children", "delete_job",
    "finish_job", "finish_many", "get_job", "insert_job", "insert_jobs", "list_jobs",
    "renew_leases", "select_by_key", "due_pending", "pending_by_queue", "prune", "prune_slots",
    "rescue_stale", "claim_slot", "claim_slots", "record_runs", "ensure_runtime",
    "ensure_runtimes", "get_runtime", "list_runtimes",
    "record_run", "set_enabled", "update_task_status", "beat", "forget", "list_workers",
    "prune_workers", "database_now", "db_now", "lock_runtime", "actions", "alerts", "fields",
    "operations", "secrets", "views",
]
