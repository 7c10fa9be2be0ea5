"""`bounded.within`: a call's value or its exception, or `Late` when it has not returned in
time (it goes on in a daemon thread)."""

from __future__ import annotations

import threading

import pytest

from cronjobs.bounded import Late, within


def test_within_returns_raises_or_gives_up():
    assert within(5, lambda: 42) == 42
    with pytest.raises(KeyError, match="gone"):
        within(5, lambda: {}["gone"])
    release = threading.Event()
    with pytest.raises(Late, match="no answer within 0.2 s"):
        within(0.2, release.wait, name="test-hung")
    assert any(t.name == "test-hung" and t.daemon for t in threading.enumerate())
    release.set()
