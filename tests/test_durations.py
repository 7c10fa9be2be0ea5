"""`cronjobs.durations.seconds`: one reading of durations for constants, settings, options."""

from datetime import timedelta

import pytest

from cronjobs.durations import seconds


@pytest.mark.parametrize(("value", "expected"), [
    (90, 90.0), (1.5, 1.5), ("90", 90.0), ("45s", 45.0), ("30m", 1800.0), ("26h", 93600.0),
    ("7d", 604800.0), ("1.5h", 5400.0), (" 5m ", 300.0), (timedelta(minutes=2), 120.0)])
def test_durations_as_people_write_them(value, expected):
    assert seconds(value, name="JITTER") == expected


@pytest.mark.parametrize("value", ["", "5 minutes", "-5m", "5w", None, True, [5], -1, 0, "0s",
                                   float("nan"), 367 * 86400, "400d"])
def test_bad_durations_are_refused_naming_the_value(value):
    with pytest.raises(ValueError) as exc:
        seconds(value, name="CATCHUP_WINDOW")
    text = str(exc.value)
    assert text.startswith("CATCHUP_WINDOW must be a duration") and repr(value)[:20] in text
    assert "\n" not in text


def test_zero_when_asked_and_a_maximum():
    assert seconds("0", name="x", zero=True) == 0.0
    assert seconds(0, name="JITTER", zero=True) == 0.0
    with pytest.raises(ValueError, match="at most 3600 s"):
        seconds("2h", name="JITTER", maximum=3600)
