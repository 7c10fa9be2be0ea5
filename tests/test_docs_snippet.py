"""The "Testing your handler" snippet of docs/handlers.md runs as written."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import ROOT


def test_testing_snippet_runs(tmp_path):
    text = (ROOT / "docs" / "handlers.md").read_text()
    section = text[text.index("## Testing your handler"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    code = code.replace('"sqlite:///test.db"', repr(f"sqlite:///{tmp_path / 'test.db'}"))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
