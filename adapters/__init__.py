"""Adapters: the contracts (``adapters.base``) and the built-in implementations."""

from adapters.base import (
    InputAdapter,
    InputAdapterFactory,
    ItemKind,
    OutputAdapter,
    OutputAdapterFactory,
    SourceItem,
)

__all__ = [
    "InputAdapter",
    "InputAdapterFactory",
    "ItemKind",
    "OutputAdapter",
    "OutputAdapterFactory",
    "SourceItem",
]
