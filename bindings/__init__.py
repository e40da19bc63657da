"""Binding queries to adapters: ``Application``, ``Stream``, ``Query``, and the query-binder
model's ``QueryTemplate`` and ``QueryBinder``."""

from bindings.application import Application
from bindings.query import Query
from bindings.stream import Stream
from bindings.template import QueryBinder, QueryTemplate

__all__ = ["Application", "Query", "QueryBinder", "QueryTemplate", "Stream"]
