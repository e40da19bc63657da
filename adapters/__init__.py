"""Adapters: the built-in implementations and the push-style base for StreamInsight ports
(``adapters.push``). The contracts they implement are defined by the engine
(``engine.contracts``) and exported here too, where adapter writers look for them."""

from ctistream.adapters.push import (
    AdapterState,
    ArrivalStamp,
    EnqueueResult,
    PushAdapterError,
    PushInputAdapter,
    PushInputAdapterFactory,
    PushInputSource,
)
from ctistream.engine.contracts import (
    InputAdapter,
    InputAdapterFactory,
    ItemKind,
    OutputAdapter,
    OutputAdapterFactory,
    SourceItem,
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
