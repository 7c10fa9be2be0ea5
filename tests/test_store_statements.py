"""The store's statements have the shapes their guarantees rest on, per dialect, without a
database: the claim locks (SKIP LOCKED where there are row locks), orders by priority and
id and writes the due condition once; outcomes and renewals are fenced by status and
attempt; the due condition and the database-clock lease are each written in one place."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.dialects import mysql, postgresql, sqlite

from cronjobs.store import ClaimRequest
from cronjobs.store.claim import PROBE, select_sql, update_params, update_sql
from cronjobs.store.finish import finish_sql
from cronjobs.store.flow import HOLDS_STORED_SQL, NO_HOLDS_STORED_SQL, claim_hold_sql, hold_sql
from cronjobs.store.leases import renew_sql
from cronjobs.store.models import cronjob_queue as q
from cronjobs.store.sql import due, due_sql, lease_sql, ph

pytestmark = pytest.mark.core  # the core subset (make test-core)

DIALECTS = ["mysql", "postgresql", "sqlite"]
SQLA = {"mysql": mysql.dialect(), "postgresql": postgresql.dialect(), "sqlite": sqlite.dialect()}
SRC = Path(__file__).resolve().parents[1] / "src" / "cronjobs"
DUE = ("status = 'pending' AND (scheduled_at IS NULL OR scheduled_at <= {0}) "
       "AND (expires_at IS NULL OR expires_at > {0})")


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_claim_by_queue_locks_orders_and_writes_the_due_condition_once(dialect):
    sql = select_sql(dialect, by_id=False)
    assert sql.count(DUE.format(ph(dialect, "now"))) == 1
    where = sql.split(" WHERE ", 1)[1]
    assert where.count("scheduled_at") == 2 and where.count("status") == 1
    assert f"WHERE queue = {ph(dialect, 'queue')} AND " in sql
    assert sql.endswith(f"ORDER BY priority, id LIMIT {ph(dialect, 'limit')}"
                        + ("" if dialect == "sqlite" else " FOR UPDATE SKIP LOCKED"))
    assert "result_payload" not in sql  # a job never needs its stored result to run


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_claim_by_id_takes_a_pending_row_due_or_not_and_waits_for_a_lock(dialect):
    sql = select_sql(dialect, by_id=True)
    assert f"WHERE id = {ph(dialect, 'job_id')} AND status = 'pending'" in sql
    assert "scheduled_at <=" not in sql and "SKIP LOCKED" not in sql
    assert sql.endswith("" if dialect == "sqlite" else " FOR UPDATE")


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_policy_condition_is_anded_before_the_order(dialect):
    extra = f"type <> {ph(dialect, 'p_type')}"
    sql = select_sql(dialect, by_id=False, extra=extra)
    assert f"{DUE.format(ph(dialect, 'now'))} AND ({extra}) ORDER BY priority, id" in sql
    assert select_sql(dialect, by_id=True, extra=extra).count(f"AND ({extra})") == 1


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_policy_probe_is_the_last_column_and_the_flow_probe_is_uncorrelated(dialect):
    """The claim reads a policy's probe as its SELECT's last column (`claim_jobs` pops
    it); the flow policy's probe names no `cronjob_queue` column, so the database reads
    it once per statement, not once per candidate."""
    sql = select_sql(dialect, by_id=False, probe=HOLDS_STORED_SQL)
    assert f", {HOLDS_STORED_SQL} AS {PROBE} FROM cronjob_queue WHERE queue = " in sql
    assert sql.replace(f", {HOLDS_STORED_SQL} AS {PROBE}", "") == select_sql(dialect, False)
    assert "cronjob_queue" not in HOLDS_STORED_SQL
    assert f"AS {PROBE} FROM" in select_sql(dialect, by_id=True, probe=HOLDS_STORED_SQL)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_claims_hold_condition_is_one_term_whose_guard_reads_the_flow_tables_once(dialect):
    """`claim_hold_sql` is AND-ed with a limit's exclusion (`FlowPolicy.where`): its OR
    must be inside its own parentheses. Its guard is uncorrelated (no `cronjob_queue`
    column in it), so the database reads it once per statement."""
    sql = claim_hold_sql(dialect)
    depth = 0
    for i, char in enumerate(sql):
        depth += {"(": 1, ")": -1}.get(char, 0)
        assert depth > 0 or i == len(sql) - 1, f"the term closes at {i}: {sql}"
    assert sql == f"({NO_HOLDS_STORED_SQL} OR ({hold_sql(dialect)}))"
    assert "cronjob_queue" not in NO_HOLDS_STORED_SQL


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_claim_update_is_conditional_leases_on_the_database_clock_and_resolves_attempts(
        dialect):
    sql = update_sql(dialect, [3, 1, 2])
    if dialect == "postgresql":  # one text for every claim, the rows found by id alone
        assert sql.endswith("WHERE id = ANY(%(ids)s::bigint[]) AND status || '' = 'pending'")
        assert update_sql(dialect, [4]) == sql
        assert update_params(dialect, [3, 1, 2], now=1) == {"now": 1, "ids": [3, 1, 2]}
    else:
        assert sql.endswith("WHERE id IN (3, 1, 2) AND status = 'pending'")
        assert update_params(dialect, [3, 1, 2], now=1) == {"now": 1}
    assert f"locked_until = {lease_sql(dialect, ph(dialect, 'lease'))}" in sql
    assert f"max_attempts = COALESCE(max_attempts, {ph(dialect, 'max_attempts')})" in sql
    assert "attempts = attempts + 1" in sql and "status = 'running'" in sql


@pytest.mark.parametrize("dialect", DIALECTS)
def test_outcomes_and_renewals_are_fenced_by_status_and_attempt(dialect):
    finish = finish_sql(dialect, ("status", "error"))
    assert finish.endswith(f"WHERE id = {ph(dialect, 'job_id')} AND status = 'running' "
                           f"AND attempts = {ph(dialect, 'attempt')}")
    renew = renew_sql(dialect, ((7, 2), (9, 1)))
    assert renew.endswith("WHERE status = 'running' AND ((id = 7 AND attempts = 2) OR "
                          "(id = 9 AND attempts = 1))")
    assert f"SET locked_until = {lease_sql(dialect, ph(dialect, 'lease'))} " in renew


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_core_due_condition_is_the_driver_sqls(dialect):
    compiled = str(select(q.c.id).where(due(datetime(2026, 1, 1))).compile(
        dialect=SQLA[dialect]))
    placeholder = re.search(r"scheduled_at <= (.+?)\) AND \(expires_at", compiled).group(1)
    assert f"({due_sql(dialect).replace(ph(dialect, 'now'), placeholder)})" in compiled


def test_the_due_condition_and_the_database_clock_are_written_in_one_module():
    """Everything else uses `store.sql`: no other module of the package compares
    `scheduled_at` in SQL or names a database clock."""
    pattern = re.compile(r"scheduled_at <=|scheduled_at\.is_\(None\)|UTC_TIMESTAMP|"
                         r"statement_timestamp|'now',")
    found = {str(path.relative_to(SRC)) for path in SRC.rglob("*.py")
             if pattern.search(path.read_text(encoding="utf-8"))}
    assert found == {"store/sql.py"}


@pytest.mark.parametrize("kwargs,error", [
    ({}, "a claim names a queue or a job id"),
    ({"queue": "a", "job_id": 1}, "a claim names a queue or a job id"),
    ({"queue": "a", "limit": 0}, "limit must be >= 1 (1 for a job id), got 0"),
    ({"job_id": 5, "limit": 2}, "limit must be >= 1 (1 for a job id), got 2"),
])
def test_a_claim_request_names_a_queue_or_one_row(kwargs, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        ClaimRequest(datetime(2026, 1, 1), "w:1", **kwargs)
