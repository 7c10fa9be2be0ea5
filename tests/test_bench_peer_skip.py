"""Without a Python 3.12 interpreter the bench's peers section skips Oban-py with one
line saying where it looked, and keeps cronjobs and Procrastinate."""

from __future__ import annotations

import pytest
from bench import peer_systems


def test_no_python_312_skips_oban_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(peer_systems, "VENVS", tmp_path / "venvs")  # no venv made earlier
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))  # no pyenv versions
    monkeypatch.setenv("PATH", str(tmp_path))  # no python3.12 on the PATH
    monkeypatch.delenv("BENCH_PYTHON312", raising=False)
    systems, skipped = peer_systems.available()
    assert [s.name for s in systems] == ["cronjobs", "procrastinate"]
    assert list(skipped) == ["oban-py"]
    assert skipped["oban-py"].startswith("no Python 3.12 found: looked for $BENCH_PYTHON312")
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"oban-py: skipped ({skipped['oban-py']})"]
    assert not (tmp_path / "venvs").exists()


def test_an_interpreter_that_is_not_312_is_not_taken(tmp_path, monkeypatch):
    fake = tmp_path / "python3.12"  # on the PATH under that name, but another version
    fake.write_text("#!/bin/sh\necho '(3, 13)'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("BENCH_PYTHON312", raising=False)
    with pytest.raises(peer_systems.Unavailable, match="no Python 3.12 found"):
        peer_systems.find_python312()
