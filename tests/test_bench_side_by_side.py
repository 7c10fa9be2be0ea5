"""The flow scenario's side-by-side rates count each drain's completions over the window
both drains were running, not over each one's own span: a drain that started earlier or
ran on after the other stopped is not credited with the time it ran alone."""

from __future__ import annotations

import pytest
from bench.flow import common_rates


def _stamps(start: float, end: float, rate: float) -> list[float]:
    """Completion times from `start` to `end` s at `rate` per second."""
    return [start + i / rate for i in range(int((end - start) * rate) + 1)]


def test_rates_are_counted_over_the_window_both_drains_ran():
    early = _stamps(0.0, 20.0, 100.0)  # alone from 0 to 5 s, then beside the other
    late = _stamps(5.0, 15.0, 50.0)  # 5 to 15 s only
    rates = common_rates({"early": early, "late": late})
    assert rates["early"] == pytest.approx(100.0, rel=0.02)
    assert rates["late"] == pytest.approx(50.0, rel=0.02)


def test_the_window_ignores_each_drains_first_and_last_completions():
    steady = _stamps(1.0, 11.0, 200.0)
    # a slow start (10 completions over the first 5 s) and a straggler 30 s later
    other = [i * 0.5 for i in range(10)] + _stamps(5.0, 11.0, 200.0) + [40.0]
    rates = common_rates({"steady": steady, "other": other}, skip_fraction=0.01)
    assert rates["other"] == pytest.approx(200.0, rel=0.03)
    assert rates["steady"] == pytest.approx(200.0, rel=0.03)


def test_tiny_drains_fall_back_to_their_own_spans():
    a = _stamps(0.0, 0.5, 400.0)
    b = _stamps(0.3, 0.6, 400.0)
    rates = common_rates({"a": a, "b": b})
    assert rates["a"] == pytest.approx(400.0, rel=0.05)
    assert rates["b"] == pytest.approx(400.0, rel=0.05)


def test_a_drain_with_no_completions_reads_zero():
    assert common_rates({"a": _stamps(0.0, 5.0, 10.0), "b": []}) == {"a": 0.0, "b": 0.0}
