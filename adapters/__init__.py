"""Adapters: the contracts (``adapters.base``), the push-style base for StreamInsight ports
(``adapters.push``) and the built-in implementations."""

from ctistream.adapters.base import (
    InputAdapter,
    InputAdapterFactory,
    ItemKind,
    OutputAdapter,
    OutputAdapterFactory,
    SourceItem,
)
from ctistream.adapters.push import (
    AdapterState,
    ArrivalStamp,
    EnqueueResult,
    PushAdapterError,
    PushInputAdapter,
    PushInputAdapterFactory,
    PushInputSource,
)

__all__ = [
    "AdapterState",
    "ArrivalStamp",
    "EnqueueResult",
    "InputAdapter",
    "InputAdapterFactory",
    "ItemKind",
    "OutputAdapter",
    "OutputAdapterFactory",
    "PushAdapterError",
    "PushInputAdapter",
    "PushInputAdapterFactory",
    "PushInputSource",
    "SourceItem",
]
