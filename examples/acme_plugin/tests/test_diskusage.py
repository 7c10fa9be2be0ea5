"""Tests of the acme-cronjobs plugin, written with `cronjobs.testing` as a plugin author
would. They need the package installed: its entry point is what registers the handlers."""

from __future__ import annotations

import json
import os
from datetime import datetime

import pytest
from acme_cronjobs import DiskUsageExecute

from cronjobs import queue
from cronjobs.i18n import use_locale
from cronjobs.scheduler import tick
from cronjobs.tasks import task_infos
from cronjobs.testing import drain, make_test_app


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """Two folders of known size, named in ACME_DISKUSAGE_PATHS."""
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "sub").mkdir(parents=True)
    b.mkdir()
    (a / "one.txt").write_bytes(b"x" * 100)
    (a / "sub" / "two.txt").write_bytes(b"y" * 250)
    (b / "big.bin").write_bytes(b"z" * 3000)
    monkeypatch.setenv("ACME_DISKUSAGE_PATHS", os.pathsep.join([str(a), str(b)]))
    monkeypatch.delenv("ACME_DISKUSAGE_LIMIT_MB", raising=False)
    return a, b


def test_registered_through_the_entry_point(tmp_path):
    app = make_test_app(tmp_path)
    for job_type in ("acme.diskusage.discover", "acme.diskusage.execute"):
        assert app.resolve(job_type) is not None
        assert app.handlers.handler_source(job_type).startswith("entry point acme (")
    app.close()


def test_not_available_until_configured(tmp_path, monkeypatch):
    monkeypatch.delenv("ACME_DISKUSAGE_PATHS", raising=False)
    app = make_test_app(tmp_path, now=datetime(2026, 1, 1, 12, 0))
    info = next(i for i in task_infos(app) if i.task == "acme-diskusage")
    assert info.available is False
    assert tick().skipped["acme-diskusage"] == "unavailable"
    app.close()


def test_hourly_discover_measures_each_folder(tmp_path, folders):
    app = make_test_app(tmp_path, now=datetime(2026, 1, 1, 12, 0))
    started = {task: job_id for task, _slot, job_id in tick().started}
    drain(app)
    discover = queue.get(started["acme-diskusage"])
    assert discover["status"] == "completed", discover["error"]
    jobs = json.loads(discover["result_payload"])["jobs"]
    results = [json.loads(queue.get(j)["result_payload"]) for j in jobs]
    assert [(r["files"], r["bytes"]) for r in results] == [(2, 350), (1, 3000)]
    app.close()


def test_over_the_limit_fails(tmp_path, folders, monkeypatch):
    monkeypatch.setenv("ACME_DISKUSAGE_LIMIT_MB", "0.001")  # 1000 bytes
    app = make_test_app(tmp_path)
    job_id = queue.dispatch("acme.diskusage.execute", {"path": str(folders[1])}, max_attempts=1)
    queue.process(job_id)
    row = queue.get(job_id)
    assert row["status"] == "failed"
    assert row["error"] == f"{folders[1]} holds 3000 bytes, over the limit of 1000"
    app.close()


def test_results_tab_in_turkish_is_escaped():
    result = {"path": "/srv/<x>", "files": 2, "bytes": 350, "limit_bytes": None}
    with use_locale("tr"):
        html = str(DiskUsageExecute.render_summary(result))
    assert "<th>Klasör</th><td>/srv/&lt;x&gt;</td>" in html
    assert "<th>Dosya sayısı</th><td>2</td>" in html
