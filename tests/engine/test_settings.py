"""Advance-time settings are frozen, validated pydantic models, positional as in StreamInsight."""

from __future__ import annotations

from datetime import timedelta

import pytest
from ctistream.engine import (
    TICK,
    AdapterAdvanceTimeSettings,
    AdvanceTimeGenerationSettings,
    AdvanceTimeImportSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
)
from pydantic import ValidationError


def test_generation_settings_build_positionally_like_streaminsight():
    g = AdvanceTimeGenerationSettings(10, timedelta(seconds=5), True)
    assert (g.frequency, g.delay, g.flush_on_stop) == (10, timedelta(seconds=5), True)
    assert g.by_count and g.delay_ticks == 5_000_000


def test_int_durations_are_ticks_never_seconds():
    g = AdvanceTimeGenerationSettings(frequency=timedelta(seconds=1), delay=-TICK)
    assert g.delay == -TICK and g.frequency_ticks == 1_000_000 and not g.by_count


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"frequency": 0}, "must be >= 1; got 0. Fix"),
        ({"frequency": timedelta(0)}, "at least 1 tick"),
        (
            {"frequency": "10"},
            "frequency must be a timedelta or a Spark-style .* got '10': a number",
        ),
        ({"frequency": True}, "got True"),
    ],
)
def test_bad_generation_settings_say_what_and_how_to_fix(kwargs, message):
    with pytest.raises(ValidationError, match=message):
        AdvanceTimeGenerationSettings(**kwargs)


def test_settings_need_generation_or_import():
    with pytest.raises(
        ValidationError, match="needs generation settings, import settings, or both"
    ):
        AdvanceTimeSettings()
    both = AdvanceTimeSettings(
        AdvanceTimeGenerationSettings(1),
        AdvanceTimeImportSettings("data"),
        AdvanceTimePolicy.ADJUST,
    )
    assert both.import_settings.stream_name == "data" and both.policy is AdvanceTimePolicy.ADJUST


def test_settings_are_frozen():
    s = AdvanceTimeSettings.increasing_start_time()
    with pytest.raises(ValidationError):
        s.policy = AdvanceTimePolicy.ADJUST  # type: ignore[misc]


def test_streaminsight_helpers():
    inc = AdvanceTimeSettings.increasing_start_time().generation
    strict = AdvanceTimeSettings.strictly_increasing_start_time().generation
    unordered = AdvanceTimeSettings.unordered_start_time(timedelta(seconds=2)).generation
    assert (inc.frequency, inc.delay, inc.flush_on_stop) == (1, timedelta(0), True)
    assert strict.delay == -TICK
    assert unordered.delay == timedelta(seconds=2)


def test_adapter_settings_require_generation_and_convert_to_binding_form():
    with pytest.raises(ValidationError):
        AdapterAdvanceTimeSettings()
    a = AdapterAdvanceTimeSettings(AdvanceTimeGenerationSettings(5), AdvanceTimePolicy.ADJUST)
    assert a.as_binding() == AdvanceTimeSettings(
        AdvanceTimeGenerationSettings(5), None, AdvanceTimePolicy.ADJUST
    )


def test_import_needs_a_stream_name():
    with pytest.raises(ValidationError, match="empty"):
        AdvanceTimeImportSettings("  ")
