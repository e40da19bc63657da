"""Bases that keep ``help()`` to what a class defines: the engine's and the adapters' pydantic
models (settings and configs) and their string enums. ``help()`` and pydoc list what ``dir()``
of a class gives, and without these a model listed forty-odd inherited pydantic methods and an
enum every method of ``str``."""

from __future__ import annotations

from enum import EnumType, StrEnum

from pydantic import BaseModel
from pydantic._internal._model_construction import ModelMetaclass

__all__ = ["Choice", "Model"]


def _own_names(cls: type, stop: type) -> set[str]:
    """The public names ``cls`` and its bases up to ``stop`` (excluded) define."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is stop:
            break
        names.update(n for n in vars(klass) if not n.startswith(("_", "model_")))
    return names


class _ModelType(ModelMetaclass):
    def __dir__(cls) -> list[str]:
        # pydantic's own methods (model_dump, model_validate, ...) are still there, and in
        # dir() of an instance
        return sorted(_own_names(cls, BaseModel))


class Model(BaseModel, metaclass=_ModelType):
    """A pydantic model whose ``help()`` shows what it defines: its docstring (which lists its
    fields), its signature, its own methods and properties."""


class _ChoiceType(EnumType):
    def __dir__(cls) -> list[str]:
        # the members and what the enum defines; str's methods are still there
        return sorted({*cls._member_names_, *_own_names(cls, Choice)})


class Choice(StrEnum, metaclass=_ChoiceType):
    """A closed set of names whose members are also their string values (a ``StrEnum``), whose
    ``help()`` shows its members and what it defines."""
