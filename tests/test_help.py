"""``help(ctistream)`` is a usable overview: the package docstring names every public name by
topic, and the classes' help shows what they define, not what pydantic or ``str`` give every
model and enum."""

from __future__ import annotations

import pydoc
import re

import ctistream


def _help(thing: object) -> str:
    return pydoc.render_doc(thing, renderer=pydoc.plaintext)


def test_the_package_docstring_names_every_public_name():
    doc = ctistream.__doc__ or ""
    named = set(re.findall(r"[A-Za-z_]+", doc))
    assert [name for name in ctistream.__all__ if name not in named] == []
    assert "docs/semantics.md" in doc


def test_help_of_the_package_lists_no_inherited_pydantic_or_str_methods():
    shown = _help(ctistream)
    assert "inherited from pydantic" not in shown
    assert "inherited from builtins.str" not in shown
    assert "model_dump" not in shown and "zfill" not in shown


def test_help_of_a_settings_class_shows_its_signature_docstring_and_own_members():
    shown = _help(ctistream.AdvanceTimeGenerationSettings)
    assert (
        "AdvanceTimeGenerationSettings(frequency: 'int | timedelta | str | None' = None, "
        "delay: 'timedelta | str'"
    ) in shown
    assert "Generate CTIs from the events of an input." in shown
    assert "frequency_ticks" in shown  # its own property
    assert "model_validate" not in shown and "model_fields" not in shown
    # pydantic's methods are still there, for the instances
    settings = ctistream.AdvanceTimeGenerationSettings(3)
    assert settings.model_dump()["frequency"] == 3 and "model_dump" in dir(settings)


def test_help_of_an_enum_shows_its_members():
    shown = _help(ctistream.EventShape)
    assert all(f"{m} = <EventShape.{m}: '{m}'>" in shown for m in ("POINT", "INTERVAL", "EDGE"))
    assert "capitalize" not in shown
    assert ctistream.EventShape.POINT == "POINT" and ctistream.EventShape("EDGE").lower() == "edge"
