"""The overlap check of a tick reads the last runs' families through indexes: its
statements, EXPLAINed on MariaDB over 30,000 rows (discover rows with 9 children each, as
bench/dashboard_pages.py makes them), use the primary key and `(root_id, status, id)`,
never a table or full index scan."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from cronjobs import store
from test_dashboard_explain import ROWS, _bench


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_the_family_check_uses_the_indexes(make_app):
    app = make_app()
    _bench().fill(app.engine, ROWS)
    with app.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE cronjob_queue SET root_id = parent_id "
                             "WHERE parent_id IS NOT NULL")
        conn.exec_driver_sql("ANALYZE TABLE cronjob_queue").all()
        roots = [r for r, in conn.exec_driver_sql(
            "SELECT id FROM cronjob_queue WHERE parent_id IS NULL ORDER BY id LIMIT 400")]
    captured: list[tuple[str, object]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("SELECT"):
            captured.append((statement, parameters))

    sa.event.listen(app.engine, "before_cursor_execute", capture)
    with app.engine.connect() as conn:
        live = store.live_in_families(conn, roots)
    sa.event.remove(app.engine, "before_cursor_execute", capture)
    assert live and set(live) <= set(roots)  # 3 % of the children are pending or running
    assert len(captured) == 3  # the roots, their live descendants, their live callbacks
    with app.engine.connect() as conn:
        for statement, params in captured:
            for step in conn.exec_driver_sql("EXPLAIN " + statement, params).mappings():
                assert step["type"] in ("range", "ref", "eq_ref", "const"), (statement, step)
                assert step["key"] in ("PRIMARY", "ix_cronjob_queue_root_status",
                                       "ix_cronjob_queue_parent"), step
                # an estimate: three status ranges per root (pending, waiting, running)
                assert int(step["rows"] or 0) <= 15 * len(roots), step
