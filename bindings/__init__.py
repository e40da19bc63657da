"""Binding queries to adapters: ``Application``, ``Stream``, ``Query``, and the query-binder
model's ``QueryTemplate`` and ``QueryBinder``."""

from ctistream.bindings.application import Application
from ctistream.bindings.query import Query
from ctistream.bindings.stream import Stream
from ctistream.bindings.template import QueryBinder, QueryTemplate

__all__ = ["Application", "Query", "QueryBinder", "QueryTemplate", "Stream"]
